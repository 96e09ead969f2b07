"""The engine's step cache against the plain diffusers call and the exact engine, in one run, with fidelity.

Model: Wan2.1-T2V-1.3B's shape with random weights (benchmarks/harness/wan_model.py). One process: the plain
call (eager bf16, one request at a time) first, then one VideoGenerator (compiled blocks, CUDA graphs, the
engine's kernels) warmed at batch 1 for each tier, and each step-cache policy per request on it (a policy is
part of the request's parameters, so one compile serves them all). Every policy makes the same seeds, so each
video is compared frame by frame with the exact engine's: mean and largest difference in uint8 levels, and PSNR.
The weights are random: the comparison is a proxy for what a trained model would show.

    python benchmarks/experiments/step_cache_gpu.py --out DIR                      # 480p and 720p, 33 frames, 20 steps, CFG 5
    python benchmarks/experiments/step_cache_gpu.py --out DIR --device cpu --smoke # the tiny model: checks the script

Writes DIR/step_cache_gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from benchmarks.harness.wan_calls import POLICIES, engine_call, plain_call
from benchmarks.harness.wan_model import TIERS, build_pipeline
from benchmarks.harness.wan_vae import fidelity
from studio.engine.generator import VideoGenerator


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, 4 steps: checks the script only")
    parser.add_argument("--tiers", default="480p,720p")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=5.0)
    parser.add_argument("--repeats", default="480p=2,720p=1", help="timed requests per tier and policy")
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.frames = 4, 5
    tiers = args.tiers.split(",")
    repeats = {tier: 1 for tier in tiers} | {
        part.split("=")[0]: int(part.split("=")[1]) for part in args.repeats.split(",") if "=" in part
    }
    policies = {name: POLICIES[name] for name in args.policies.split(",")}
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "tiers": {}}

    def save() -> None:
        (args.out / "step_cache_gpu.json").write_text(json.dumps(report, indent=2))

    pipe, _ = build_pipeline(args.device, args.smoke)
    report["env"] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
    }
    # The plain call first: the engine's set-up changes the shared modules afterwards.
    plain_call(pipe, args, tiers[0], 0)  # warm-up
    for tier in tiers:
        times = [plain_call(pipe, args, tier, 1000 + i)[0] for i in range(repeats[tier])]
        report["tiers"][tier] = {"plain_s": [round(t, 3) for t in times], "plain_median_s": statistics.median(times)}
        print(f"plain {tier}: {times}", flush=True)
        save()
    generator = VideoGenerator("wan2.1-t2v-1.3b-random", device=args.device)
    generator.load(pipeline=pipe)
    started = time.perf_counter()
    generator.warmup([(*TIERS[tier], args.frames) for tier in tiers], max_batch=1)
    report["warmup_s"] = round(time.perf_counter() - started, 1)
    print(f"engine warm-up {report['warmup_s']} s", flush=True)
    for tier in tiers:
        row = report["tiers"][tier]
        reference: dict[int, np.ndarray] = {}
        for name, policy in policies.items():
            times, quality = [], []
            for i in range(repeats[tier]):
                seconds, frames = engine_call(generator, args, tier, 1000 + i, policy)
                times.append(seconds)
                if name == "exact":
                    reference[i] = frames
                elif i in reference:
                    quality.append(fidelity(frames, reference[i]))
            median = statistics.median(times)
            row[name] = {
                "latency_s": [round(t, 3) for t in times],
                "median_s": round(median, 3),
                "of_plain": round(median / row["plain_median_s"], 3),
                "transformer_steps": policy.computed_count(args.steps),
                "fidelity_vs_exact": quality,
            }
            print(f"{tier} {name}: {row[name]}", flush=True)
            save()
    print("\n| tier | what | latency (s) | of the plain call | transformer steps | vs exact: mean / max levels, PSNR |")
    print("|---|---|---|---|---|---|")
    for tier, row in report["tiers"].items():
        print(f"| {tier} | plain call | {row['plain_median_s']:.2f} | 1.00 | {args.steps} | |")
        for name in policies:
            figures = row[name]
            shown = "; ".join(
                f"{q['mean_levels']:.2f} / {q['max_levels']}, {q['psnr_db']:.1f} dB"
                for q in figures["fidelity_vs_exact"]
            )
            print(
                f"| {tier} | engine, {name} | {figures['median_s']:.2f} | {figures['of_plain']:.3f} | "
                f"{figures['transformer_steps']} | {shown} |"
            )
    generator.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
