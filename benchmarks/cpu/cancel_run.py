"""Cancelling a large run: how long until every request of it has ended, and the longest the studio's event loop
was held meanwhile (what every other visitor's page waits for).

One embedded engine (serial on CPU) and a studio controller attached to it with one in-flight slot: a run of N
requests puts its first at the engine and the other N-1 waiting in the studio; then Cancel all. Reported per N:
the time from the cancel to the last request ended ("cancel N median X s") and the longest gap between two ticks
of a 10 ms ticker on the same loop ("loop held N median X s"). Both should grow in proportion to N, and the loop
should never be held for long. Runs on this checkout or, through side_by_side.py, on an earlier revision.

Usage: python benchmarks/cpu/cancel_run.py [--requests 1000,5000] [--repeats 2]
       python benchmarks/cpu/side_by_side.py --rev REV --rounds 1 -- cancel_run.py --requests 1000,5000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness.stats import LoopWatch
from studio.backend.controller import StudioController
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.backend.visitors import LOCAL_OPERATOR
from studio.config import DEFAULT_MODEL_DIR, StudioSettings

TICK_S = 0.01


async def until(condition, bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not reach the state awaited")
        await asyncio.sleep(0.01)


async def one_cancel(controller: StudioController, requests: int) -> tuple[float, float]:
    """(cancel to the last request ended, longest loop gap meanwhile), in seconds."""
    prompts = [f"a blue square {i} moving up on black" for i in range(requests)]
    run = controller.new_run(RunSpec(prompts=prompts, tier="256p", aspect="1:1", frames=33, steps=200, seed=1))
    run.start()
    await until(lambda: controller.dispatcher.in_flight >= 1, 300)
    watch = LoopWatch(TICK_S)
    watch.start()
    started = time.monotonic()
    controller.board.cancel_all(by=LOCAL_OPERATOR, everyone=True)
    await until(lambda: all(view.state.finished for view in run.views), 600)
    took = time.monotonic() - started
    await watch.stop()
    return took, watch.held_s


async def main(args: argparse.Namespace) -> None:
    sizes = [int(size) for size in args.requests.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        engine_settings = StudioSettings(_env_file=None, model=str(DEFAULT_MODEL_DIR), engine_threads=1)
        server = ManagedServer(lambda port: embedded_launch(engine_settings, port), log_path=Path(tmp) / "engine.log")
        await asyncio.to_thread(server.start)
        values = {
            "engine": "remote",
            "remote_urls": [server.base_url],
            "outputs_dir": Path(tmp) / "outputs",
            "in_flight_slots": 1,
            "poll_interval_s": 0.05,
        }
        if "max_run_requests" in StudioSettings.model_fields:  # a revision with a run cap: above the largest run
            values["max_run_requests"] = max(sizes)
        controller = StudioController(StudioSettings(_env_file=None, **values))
        try:
            await asyncio.to_thread(controller.start)
            for size in sizes:
                figures = [await one_cancel(controller, size) for _ in range(args.repeats)]
                print(f"cancel {size} median {statistics.median(t for t, _ in figures):.3f} s", flush=True)
                print(f"loop held {size} median {statistics.median(h for _, h in figures):.3f} s", flush=True)
        finally:
            if controller.fleet.pool is not None:
                await controller.fleet.pool.close()
            controller.close()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", default="1000,5000", help="the runs' sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="cancels of each size (median)")
    asyncio.run(main(parser.parse_args()))
