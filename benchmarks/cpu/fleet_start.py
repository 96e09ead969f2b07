"""How long a fleet of K replicas takes to be ready, against one replica, in one run: the replicas start side by
side, so K of them should take about as long as one.

The embedded engine on this machine (`--replicas K`, the studio's own fleet: studio.backend.servers.fleet_manager), started and
stopped `--rounds` times each way, alternating; reported: the median time from the start call to every replica
answering its health check, and the ratio.

Usage: python benchmarks/cpu/fleet_start.py [--replicas 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from studio.backend.servers.fleet_manager import FleetManager
from studio.config import DEFAULT_MODEL_DIR, StudioSettings


def start_s(replicas: int, logs: Path) -> tuple[float, str]:
    settings = StudioSettings(_env_file=None, model=str(DEFAULT_MODEL_DIR), replicas=replicas, engine_threads=1)
    fleet = FleetManager(settings, logs)
    started = time.perf_counter()
    try:
        fleet.start(wait=True)
        return time.perf_counter() - started, fleet.layout or ""
    finally:
        fleet.close()


def main(args: argparse.Namespace) -> None:
    one, many = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            seconds, _ = start_s(1, Path(tmp) / f"one{round_}")
            one.append(seconds)
            seconds, label = start_s(args.replicas, Path(tmp) / f"many{round_}")
            many.append(seconds)
            print(f"round {round_ + 1}: 1 replica {one[-1]:.2f} s, {label} {many[-1]:.2f} s", flush=True)
    ratio = statistics.median(many) / statistics.median(one)
    print(
        f"ready: 1 replica {statistics.median(one):.2f} s, {args.replicas} replicas {statistics.median(many):.2f} s "
        f"(medians of {args.rounds}): {ratio:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    main(parser.parse_args())
