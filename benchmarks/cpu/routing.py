"""Replicas behind the router: throughput of K embedded engines (one CPU thread each) over one.

Runs `omni-studio bench`'s engine (studio.backend.bench.runner.run_bench) for 1 replica, then K replicas, alternating
`--rounds` times, same requests, and reports the throughput ratio.

Usage: python benchmarks/cpu/routing.py [--replicas 2] [--requests 16] [--concurrency 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from rich.console import Console

from studio.backend.bench.runner import BenchConfig, run_bench
from studio.config import StudioSettings


def throughput(replicas: int, args: argparse.Namespace, out: Path) -> float:
    settings = StudioSettings(_env_file=None, engine_threads=1, replicas=replicas)
    config = BenchConfig(
        requests=args.requests,
        concurrencies=[args.concurrency],
        tiers=["256p"],
        aspect="16:9",
        frames=9,
        steps=8,
        warmup=replicas,
    )
    report = asyncio.run(run_bench(settings, config, out, console=Console(stderr=True, quiet=True)))
    cell = report["cells"][0]
    assert cell["failed"] == 0, report["cells"]
    return cell["videos_per_min"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    one, many = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            one.append(throughput(1, args, Path(tmp) / f"one{i}"))
            many.append(throughput(args.replicas, args, Path(tmp) / f"many{i}"))
            print(
                f"round {i}: 1 replica {one[-1]:.2f} videos/min, {args.replicas} replicas {many[-1]:.2f} videos/min",
                flush=True,
            )
    ratio = statistics.median(many) / statistics.median(one)
    print(f"throughput {args.replicas} replicas / 1 replica (medians): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
