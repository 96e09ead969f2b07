"""`omni-studio generate` end to end against the plain diffusers call, on this machine's CPU.

Measures, in one run and alternating the two so that machine noise hits both alike:
- studio: wall time of the `omni-studio generate` subprocess (engine start, request, poll, download,
  validate, sidecar), and the engine's start-to-ready time it reports;
- baseline: the plain diffusers pipeline call of the same shape in this process (model loaded once),
  plus the mp4 encode, i.e. the least any tool could spend on the same video.

Usage: python benchmarks/cpu/generate_cpu.py [--repeats 5] [--tier 256p --aspect 16:9 --frames 33 --steps 35]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT
from studio import tiers
from studio.config import DEFAULT_MODEL_DIR

PROMPT = "a red circle moving left on a white background"


def studio_once(args: argparse.Namespace, out: Path) -> tuple[float, float]:
    command = [
        sys.executable,
        "-m",
        "studio",
        "generate",
        PROMPT,
        "--tier",
        args.tier,
        "--aspect",
        args.aspect,
        "--frames",
        str(args.frames),
        "--steps",
        str(args.steps),
        "--seed",
        "1",
        "--out",
        str(out),
        "--quiet",
    ]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - started
    ready = float(re.search(r"engine ready in ([0-9.]+) s", result.stderr).group(1))
    return wall, ready


def machine_speed_s() -> float:
    """Seconds for a fixed pure-Python loop: this machine's speed at the time (it varies from minute to minute
    on shared hosts), printed beside the results so that runs can be compared."""
    started = time.perf_counter()
    for _ in range(10**7):
        pass
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tier", default="256p")
    parser.add_argument("--aspect", default="16:9")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=35)
    args = parser.parse_args()

    import torch

    from studio.engine.generation_types import GenerationParams
    from studio.engine.generator import VideoGenerator
    from studio.media import encode_mp4

    width, height = tiers.size_for(args.tier, args.aspect)
    generator = VideoGenerator(str(DEFAULT_MODEL_DIR), device="cpu")
    generator.load()
    params = GenerationParams(
        prompt=PROMPT,
        width=width,
        height=height,
        num_frames=tiers.round_frames(args.frames),
        num_inference_steps=args.steps,
        guidance_scale=tiers.DEFAULT_GUIDANCE,
        seed=1,
    )
    studio_walls, readies, baseline, speeds = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            speeds.append(machine_speed_s())
            wall, ready = studio_once(args, Path(tmp) / "studio")
            studio_walls.append(wall)
            readies.append(ready)
            started = time.perf_counter()
            output = generator.generate(params)
            encode_mp4(output.frames, tiers.DEFAULT_FPS, Path(tmp) / f"baseline{i}.mp4")
            baseline.append(time.perf_counter() - started)
    studio_median, base_median = statistics.median(studio_walls), statistics.median(baseline)
    print(
        f"shape {width}x{height}, {params.num_frames} frames, {args.steps} steps, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {args.repeats} repeats"
    )
    print(
        f"omni-studio generate wall  median {studio_median:.2f} s  (all: {', '.join(f'{w:.2f}' for w in studio_walls)})"
    )
    print(f"  of which engine start    median {statistics.median(readies):.2f} s")
    print(f"plain diffusers call+mp4   median {base_median:.2f} s  (all: {', '.join(f'{b:.2f}' for b in baseline)})")
    print(f"ratio studio / plain       {studio_median / base_median:.2f}")
    print(f"machine speed: 10^7-iteration Python loop {min(speeds):.2f} to {max(speeds):.2f} s")
    print(f"ratio (studio - start) / plain {(studio_median - statistics.median(readies)) / base_median:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
