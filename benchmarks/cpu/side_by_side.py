"""One benchmark of benchmarks/ run on two checkouts, alternated, so that machine noise hits both alike.

The other checkout is a git revision of this repository, laid out in a temporary worktree. Each round runs
the benchmark once in each checkout (each in its own process, its own code first on the path), and the
figures each run prints are collected by name: every `NAME ... RATIO` or `NAME median X s` line is read with
the patterns below. Use it to show that a change leaves a benchmark's figures where they were. The benchmark is
named by its file name and found in each checkout's benchmarks/cpu/, gpu/ or experiments/ (or benchmarks/ itself, in
a revision from before those folders).

Usage: python benchmarks/cpu/side_by_side.py --rev REV [--rounds 2] [--benchmark-from-this] -- generate_cpu.py --repeats 3
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT
from benchmarks.harness.servers import other_checkout

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


def locate(checkout: Path, name: str) -> Path:
    """Where a checkout keeps the benchmark `name`: in one of benchmarks/' folders, or in benchmarks/ itself."""
    for folder in ("cpu", "gpu", "experiments", ""):
        path = checkout / "benchmarks" / folder / name
        if path.is_file():
            return path
    raise SystemExit(f"{checkout}: no benchmark named {name}")


def copy_from_this(other: Path, name: str) -> None:
    """This checkout's copy of the benchmark into the other, where its own is, with the harness it imports (the
    copy finds the revision's `studio` beside it, as its own would)."""
    mine = locate(ROOT, name)
    target = other / mine.relative_to(ROOT)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(mine, target)
    shutil.copytree(
        ROOT / "benchmarks" / "harness",
        other / "benchmarks" / "harness",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )


def run_in(checkout: Path, benchmark: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, str(locate(checkout, benchmark[0])), *benchmark[1:]]
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
    with (
        tempfile.TemporaryDirectory(prefix="side-by-side-") as tmp,
        other_checkout(args.rev, Path(tmp) / "other") as other,
    ):
        if args.benchmark_from_this:
            copy_from_this(other, benchmark[0])
        for round_index in range(args.rounds):
            for name, checkout in (("this", ROOT), (args.rev, other)):
                output = run_in(checkout, benchmark)
                print(f"--- round {round_index + 1}, {name}\n{output}", flush=True)
                for figure, value in figures(output).items():
                    results[name][figure].append(value)
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
