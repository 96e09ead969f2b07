"""Replicas on Ray: throughput of K embedded engines (one CPU thread each) placed as Ray actors, over one; and of
the same K replicas run by the studio directly (no Ray), for what going through Ray costs.

Each round, the studio's controller sends the same run of requests (after one warm-up request per replica) to:
1 replica on Ray, K replicas on Ray (a local Ray on loopback, as `--cluster ray` starts without --ray-address,
started for the two and shut down after them), then K replicas on this machine without Ray (no Ray process
left to share the CPU with); every other round in the opposite order. The same shapes as benchmarks/cpu/routing.py. Reports the ratios of the medians: K on
Ray over 1 on Ray (target >= 1.8x for 2), and K direct over K on Ray (target <= 1.03), and where the CPU went
in each run (the studio, the engines, Ray's own processes and the replicas' actors), in cores.

The client polls at the studio's own default interval unless --poll-interval says otherwise.

Usage: python benchmarks/cpu/ray_fleet.py [--replicas 2] [--requests 32] [--concurrency 4] [--rounds 3]
    [--poll-interval S]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers import ray_cluster
from studio.config import StudioSettings

POLL_DEFAULT = StudioSettings.model_fields["poll_interval_s"].default


def spec(prompt: str, copies: int, concurrency: int) -> RunSpec:
    return RunSpec(
        prompts=[prompt], copies=copies, tier="256p", aspect="16:9", frames=9, steps=8, concurrency=concurrency
    )


def _kind(process: psutil.Process) -> str:
    """Whose CPU a process's is: the studio's, an engine's, or Ray's (its servers, agents, workers, the actors)."""
    if process.pid == os.getpid():
        return "studio"
    command = " ".join(process.cmdline())
    return "engines" if "studio.engine" in command else "ray"


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of this process and everything under it, by pid."""
    found = {}
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            found[process.pid] = (_kind(process), times.user + times.system)
        except psutil.Error:
            continue
    return found


@dataclass
class Measure:
    per_min: float  # videos per minute
    cores: dict[str, float]  # CPU used during the run, in cores, by whose


def measure(replicas: int, cluster: str, args: argparse.Namespace, out: Path) -> Measure:
    """Videos per minute of one run, after one warm-up request per replica."""
    settings = StudioSettings(
        _env_file=None,
        engine_threads=1,
        replicas=replicas,
        cluster=cluster,
        outputs_dir=out,
        poll_interval_s=args.poll_interval,
    )
    controller = StudioController(settings)
    try:
        controller.start()

        async def timed() -> Measure:
            await controller.new_run(spec("warm up", replicas, replicas)).wait()
            before, started = cpu_seconds(), time.perf_counter()
            views = await controller.new_run(spec("a red circle", args.requests, args.concurrency)).wait()
            elapsed, after = time.perf_counter() - started, cpu_seconds()
            assert all(view.state is RequestState.DONE for view in views), [view.error for view in views]
            cores: dict[str, float] = {}
            for pid, (kind, seconds) in after.items():
                cores[kind] = cores.get(kind, 0.0) + (seconds - before.get(pid, (kind, 0.0))[1]) / elapsed
            return Measure(args.requests / elapsed * 60, cores)

        return asyncio.run(timed())
    finally:
        controller.close()


def _line(name: str, result: Measure) -> str:
    where = ", ".join(f"{kind} {cores:.2f}" for kind, cores in sorted(result.cores.items()))
    return f"{name} {result.per_min:.2f} videos/min (cores: {where})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--poll-interval", type=float, default=POLL_DEFAULT)
    args = parser.parse_args()
    k = args.replicas
    one, many, direct = [], [], []
    print(f"load average at start: {os.getloadavg()[0]:.2f}; poll interval {args.poll_interval:g} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            # Every other round in the opposite order, so that a machine that speeds up or slows down over a round
            # does not favour one of the three.
            flip = i % 2 == 1
            if flip:
                direct.append(measure(k, "local", args, Path(tmp) / f"direct{i}"))
            ray_cluster.connect(num_cpus=k)
            try:
                for replicas in (k, 1) if flip else (1, k):
                    (many if replicas == k else one).append(
                        measure(replicas, "ray", args, Path(tmp) / f"r{replicas}-{i}")
                    )
            finally:
                ray_cluster.shutdown()
            if not flip:
                direct.append(measure(k, "local", args, Path(tmp) / f"direct{i}"))
            print(
                f"round {i}: "
                + "; ".join(
                    (
                        _line("Ray 1 replica", one[-1]),
                        _line(f"Ray {k} replicas", many[-1]),
                        _line(f"direct {k} replicas", direct[-1]),
                    )
                )
                + f"; ratios {many[-1].per_min / one[-1].per_min:.2f}x and {direct[-1].per_min / many[-1].per_min:.3f}"
                + f"; load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    median = {
        name: statistics.median(r.per_min for r in runs)
        for name, runs in (("one", one), ("many", many), ("direct", direct))
    }
    print(
        f"{k} Ray replicas over 1: {median['many'] / median['one']:.2f}x throughput (medians of {args.rounds} rounds)"
    )
    print(f"{k} direct replicas over {k} on Ray: {median['direct'] / median['many']:.3f} (the cost of Ray; medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
