"""One request through the pipeline's own `__call__`: any diffusers text-to-video pipeline, one at a time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from studio.engine.frames import finished_output, to_uint8_frames
from studio.engine.generation_types import GenerationCancelled, GenerationOutput, GenerationParams
from studio.engine.loader import PipelineFacts


def generate_plain(
    pipe: Any,
    facts: PipelineFacts,
    device: str,
    params: GenerationParams,
    on_step: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool] | None,
) -> GenerationOutput:
    """`on_step(done, total)` after each step; `should_stop()` cancels at the next step."""
    total = params.num_inference_steps
    native_w, native_h = facts.native_size(params.width, params.height)
    step_times: list[float] = []
    started = time.perf_counter()

    def step_end(pipe: Any, step: int, timestep: Any, callback_kwargs: dict) -> dict:
        step_times.append(time.perf_counter())
        if on_step is not None:
            on_step(step + 1, total)
        if should_stop is not None and should_stop():
            raise GenerationCancelled
        return callback_kwargs

    if should_stop is not None and should_stop():
        raise GenerationCancelled
    pipe.scheduler = facts.new_scheduler(params.flow_shift)
    kwargs: dict[str, Any] = {
        "prompt": params.prompt,
        "negative_prompt": params.negative_prompt,
        "height": native_h,
        "width": native_w,
        "num_frames": params.num_frames,
        "num_inference_steps": total,
        "guidance_scale": params.guidance_scale,
        "generator": torch.Generator(device="cpu").manual_seed(params.seed),
        "output_type": "np",
        "callback_on_step_end": step_end,
    }
    kwargs.update({k: v for k, v in params.extra.items() if k in facts.call_parameters})
    kwargs = {k: v for k, v in kwargs.items() if k in facts.call_parameters and v is not None}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        result = pipe(**kwargs)
    finished = time.perf_counter()
    frames = to_uint8_frames(result.frames)
    denoise_end = step_times[-1] if step_times else finished
    return finished_output(frames, params, device, finished - started, denoise_end - started, finished - denoise_end)
