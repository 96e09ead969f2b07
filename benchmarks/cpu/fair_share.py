"""Fair share across visitors: one visitor's single request while another's long queue waits.

One embedded engine (serial on CPU); a studio controller attached to it with `--slots` requests in flight at once.
Visitor A queues `--requests` requests at once; once A holds every slot, visitor B submits one. Reported: B's
latency (submit to mp4 on disk) under A's load divided by the same request's latency on the idle studio (median
of `--idle` tries, same engine, same process), with the dispatcher fair (round robin across visitors) and first
come first served. Fair share keeps the ratio near slots + 1 (B waits for what is already at the server);
first come first served makes it about requests + 1.

Usage: python benchmarks/cpu/fair_share.py [--requests 64] [--slots 4] [--frames 5 --steps 2] [--idle 3] [--tries 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.backend.visitors import Visitor
from studio.config import DEFAULT_MODEL_DIR, StudioSettings

A = Visitor("a", "A", operator=True)  # not held to the queued limit: its whole queue goes in at once
B = Visitor("b", "B", operator=False)


def spec(prompts: list[str], concurrency: int, args: argparse.Namespace) -> RunSpec:
    return RunSpec(
        prompts=prompts,
        tier="256p",
        aspect="1:1",
        frames=args.frames,
        steps=args.steps,
        seed=1,
        concurrency=concurrency,
    )


async def b_latency(controller: StudioController, args: argparse.Namespace) -> float:
    run = controller.new_run(spec(["a red circle moving left on a white background"], 1, args), B)
    (view,) = await run.wait()
    assert view.state is RequestState.DONE, view.error
    return view.timings.total_s


async def measure(
    controller: StudioController, args: argparse.Namespace, fair: bool
) -> tuple[float, tuple[float, float]]:
    """(B's latency on the idle studio, (median, largest) of B's latencies under A's queue)."""
    controller.dispatcher.fair = fair
    idle = statistics.median([await b_latency(controller, args) for _ in range(args.idle)])
    prompts = [f"a blue square {i} on a white background" for i in range(args.requests)]
    many = controller.new_run(spec(prompts, args.requests, args), A)
    many.start()
    while controller.dispatcher.in_flight < args.slots:
        await asyncio.sleep(0.01)
    # B's requests land at different moments of the request running at the server: one after another, the median
    # is B's typical wait and the largest its worst.
    # First come first served: one try is the point (it waits for A's whole queue, which is then gone).
    tries = [await b_latency(controller, args) for _ in range(args.tries if fair else 1)]
    # Under fair share A's queue must outlast B's tries, or the later tries measured an idle studio.
    assert not fair or controller.board.unsent(A), "A's queue drained before B's tries ended: give A more requests"
    loaded = statistics.median(tries), max(tries)
    controller.cancel_unsent(A)  # what A still has queued is not measured
    await many.wait()
    return idle, loaded


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine_settings = StudioSettings(_env_file=None, model=str(DEFAULT_MODEL_DIR), engine_threads=args.threads)
        server = ManagedServer(lambda port: embedded_launch(engine_settings, port), log_path=Path(tmp) / "engine.log")
        await asyncio.to_thread(server.start)
        controller = StudioController(
            StudioSettings(
                _env_file=None,
                engine="remote",
                remote_urls=[server.base_url],
                outputs_dir=Path(tmp) / "outputs",
                in_flight_slots=args.slots,
                poll_interval_s=0.05,
            )
        )
        try:
            await asyncio.to_thread(controller.start)
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(
                f"{args.requests} requests of A queued, {args.slots} in flight; B's one request (256p 1:1, "
                f"{args.frames} frames, {args.steps} steps)"
            )
            print(
                f"| dispatcher | B idle (s) | B under A's queue, median of {args.tries} (fair) (s) | ratio | worst ratio |"
            )
            print("|---|---|---|---|---|")
            for fair in (True, False):
                idle, (loaded, worst) = await measure(controller, args, fair)
                name = "fair share" if fair else "first come first served"
                print(f"| {name} | {idle:.2f} | {loaded:.2f} | {loaded / idle:.1f} | {worst / idle:.1f} |", flush=True)
            print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            if controller.fleet.pool is not None:
                await controller.fleet.pool.close()
            controller.close()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64, help="visitor A's queued requests")
    parser.add_argument("--slots", type=int, default=4, help="the studio's in-flight slots")
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--idle", type=int, default=3, help="tries of B's request on the idle studio (median)")
    parser.add_argument("--tries", type=int, default=5, help="B's requests under A's queue, one after another")
    parser.add_argument("--threads", type=int, default=1, help="the engine's torch threads")
    asyncio.run(main(parser.parse_args()))
