"""Replicas on Ray: throughput of K embedded engines (one CPU thread each) placed as Ray actors, over one.

A local Ray on loopback (as `--cluster ray` starts without --ray-address) holds the fleet; the studio's controller
sends the same run of requests to 1 replica, then K, alternating `--rounds` times, and reports the throughput
ratio. The same shapes as benchmarks/routing.py, which measures the fleet on one machine without Ray.

Usage: python benchmarks/ray_fleet.py [--replicas 2] [--requests 8] [--concurrency 4] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from studio.backend import ray_cluster  # noqa: E402
from studio.backend.controller import StudioController  # noqa: E402
from studio.backend.request_state import RequestState  # noqa: E402
from studio.backend.spec import RunSpec  # noqa: E402
from studio.config import StudioSettings  # noqa: E402


def spec(prompt: str, copies: int, concurrency: int) -> RunSpec:
    return RunSpec(
        prompts=[prompt], copies=copies, tier="256p", aspect="16:9", frames=9, steps=8, concurrency=concurrency
    )


def throughput(replicas: int, args: argparse.Namespace, out: Path) -> float:
    """Videos per minute of one run, after one warm-up request per replica."""
    settings = StudioSettings(
        _env_file=None, engine_threads=1, replicas=replicas, cluster="ray", outputs_dir=out, poll_interval_s=0.05
    )
    controller = StudioController(settings)
    try:
        controller.start()

        async def timed() -> float:
            await controller.new_run(spec("warm up", replicas, replicas)).wait()
            started = time.perf_counter()
            views = await controller.new_run(spec("a red circle", args.requests, args.concurrency)).wait()
            elapsed = time.perf_counter() - started
            assert all(view.state is RequestState.DONE for view in views), [view.error for view in views]
            return args.requests / elapsed * 60

        return asyncio.run(timed())
    finally:
        controller.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    ray_cluster.connect(num_cpus=args.replicas)
    one, many = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                one.append(throughput(1, args, Path(tmp) / f"one{i}"))
                many.append(throughput(args.replicas, args, Path(tmp) / f"many{i}"))
                print(
                    f"round {i}: 1 replica {one[-1]:.2f} videos/min, "
                    f"{args.replicas} replicas {many[-1]:.2f} videos/min",
                    flush=True,
                )
    finally:
        ray_cluster.shutdown()
    ratio = statistics.median(many) / statistics.median(one)
    print(f"{args.replicas} Ray replicas over 1: {ratio:.2f}x throughput (median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
