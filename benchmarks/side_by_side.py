"""One benchmark of this directory run on two checkouts, alternated, so that machine noise hits both alike.

The other checkout is a git revision of this repository, laid out in a temporary worktree. Each round runs
the benchmark once in each checkout (each in its own process, its own code first on the path), and the
figures each run prints are collected by name: every `NAME ... RATIO` or `NAME median X s` line is read with
the patterns below. Use it to show that a change leaves a benchmark's figures where they were.

Usage: python benchmarks/side_by_side.py --rev REV [--rounds 2] [--benchmark-from-this] -- generate_cpu.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# "ratio studio / plain       1.23", "concurrency   1: studio median 0.812 s, ..., ratio 1.004", "... median 6.5 s"
FIGURE = re.compile(r"^(?P<name>[a-z][\w /()+-]*?)\s+(?:median\s+)?(?P<value>\d+\.\d+)(?:\s*s)?\b", re.IGNORECASE)
LABELLED = re.compile(r"(?P<label>concurrency\s+\d+).*?ratio\s+(?P<value>\d+\.\d+)")


def figures(output: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in output.splitlines():
        labelled = LABELLED.search(line)
        if labelled:
            found[f"{' '.join(labelled['label'].split())} ratio"] = float(labelled["value"])
            continue
        plain = FIGURE.match(line.strip())
        if plain and ("ratio" in plain["name"] or "median" in line):
            found[" ".join(plain["name"].split())] = float(plain["value"])
    return found


def run_in(checkout: Path, benchmark: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, str(checkout / "benchmarks" / benchmark[0]), *benchmark[1:]]
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the git revision to compare this checkout with")
    parser.add_argument("--rounds", type=int, default=2, help="runs of the benchmark in each checkout")
    parser.add_argument(
        "--benchmark-from-this",
        action="store_true",
        help="run this checkout's copy of the benchmark in both (for a benchmark the revision does not have yet)",
    )
    parser.add_argument("benchmark", nargs=argparse.REMAINDER, help="-- BENCHMARK.py [its arguments]")
    args = parser.parse_args()
    benchmark = [part for part in args.benchmark if part != "--"]
    if not benchmark:
        parser.error("name a benchmark after --, e.g. -- generate_cpu.py --repeats 3")
    results: dict[str, dict[str, list[float]]] = {"this": defaultdict(list), args.rev: defaultdict(list)}
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", str(other), args.rev], cwd=ROOT, check=True)
        if args.benchmark_from_this:  # the copy finds the revision's code beside it, as its own would
            shutil.copy2(ROOT / "benchmarks" / benchmark[0], other / "benchmarks" / benchmark[0])
        try:
            for round_index in range(args.rounds):
                for name, checkout in (("this", ROOT), (args.rev, other)):
                    output = run_in(checkout, benchmark)
                    print(f"--- round {round_index + 1}, {name}\n{output}", flush=True)
                    for figure, value in figures(output).items():
                        results[name][figure].append(value)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    print(f"\n| figure (median of {args.rounds} runs) | this checkout | {args.rev} | this / {args.rev} |")
    print("|---|---|---|---|")
    for figure, values in results["this"].items():
        before = results[args.rev].get(figure)
        if not before:
            continue
        now, then = statistics.median(values), statistics.median(before)
        print(f"| {figure} | {now:.3f} | {then:.3f} | {now / then:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
