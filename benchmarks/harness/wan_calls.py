"""One video from the plain diffusers call and one from the engine's VideoGenerator, each timed on the device, as
uint8 frames to compare; and the step-cache policies the benchmarks name (`exact`, `reuse/2`, `taylor/2`,
`taylor/3`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from benchmarks.harness.wan_model import TIERS, sync
from studio.engine.generation_types import GenerationOutput, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.step_cache import StepCacheMode, StepCachePolicy

POLICIES = {
    "exact": StepCachePolicy(),
    "reuse/2": StepCachePolicy(StepCacheMode.REUSE, interval=2),
    "taylor/2": StepCachePolicy(StepCacheMode.TAYLOR, interval=2),
    "taylor/3": StepCachePolicy(StepCacheMode.TAYLOR, interval=3),
}


def plain_call(
    pipe: Any, args: argparse.Namespace, tier: str, seed: int, steps: int | None = None
) -> tuple[float, np.ndarray]:
    """The plain diffusers call, timed on the device; `steps` other than the run's (a short warm-up)."""
    width, height = TIERS[tier]
    sync(args.device)
    started = time.perf_counter()
    with torch.inference_mode():
        video = pipe(
            prompt=f"a red circle moving left, request {seed}",
            height=height,
            width=width,
            num_frames=args.frames,
            num_inference_steps=steps or args.steps,
            guidance_scale=args.guidance,
            generator=torch.Generator("cpu").manual_seed(seed),
            output_type="np",
        ).frames[0]
    sync(args.device)
    return time.perf_counter() - started, (np.clip(video, 0, 1) * 255).round().astype(np.uint8)


def engine_call(generator: VideoGenerator, args: argparse.Namespace, tier: str, seed: int, policy: StepCachePolicy):
    seconds, output = engine_generate(generator, args, tier, seed, policy)
    return seconds, output.frames


def engine_generate(
    generator: VideoGenerator, args: argparse.Namespace, tier: str, seed: int, policy: StepCachePolicy
) -> tuple[float, GenerationOutput]:
    """One video from the engine, timed on the device; its output (frames, and the engine's own stage times)."""
    width, height = TIERS[tier]
    params = GenerationParams(
        prompt=f"a red circle moving left, request {seed}",
        width=width,
        height=height,
        num_frames=args.frames,
        num_inference_steps=args.steps,
        guidance_scale=args.guidance,
        seed=seed,
        step_cache=policy,
    )
    sync(args.device)
    started = time.perf_counter()
    output = generator.generate(params)
    sync(args.device)
    return time.perf_counter() - started, output
