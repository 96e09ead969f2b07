"""One request through the pipeline's own `__call__`: any diffusers text-to-video pipeline, one at a time; its
previews from the step callback, where the pipeline gives what they need (studio.engine.plain_previews)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from studio.engine.frames import finished_output, to_uint8_frames
from studio.engine.generation_types import GenerationCancelled, GenerationOutput, GenerationParams
from studio.engine.loader import PipelineFacts
from studio.engine.plain_previews import plain_previews
from studio.engine.preview_device import DevicePreviews
from studio.engine.previews import PreviewTarget


def generate_plain(
    pipe: Any,
    facts: PipelineFacts,
    device: str,
    params: GenerationParams,
    on_step: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool] | None,
    preview: PreviewTarget | None = None,
    previews: DevicePreviews | None = None,
) -> GenerationOutput:
    """`on_step(done, total)` after each step; `should_stop()` cancels at the next step; `preview`: the request's
    previews, made by `previews`."""
    total = params.num_inference_steps
    native_w, native_h = facts.native_size(params.width, params.height)
    step_times: list[float] = []
    started = time.perf_counter()
    source = plain_previews(pipe, facts.call_parameters, previews, preview)

    def step_end(pipe: Any, step: int, timestep: Any, callback_kwargs: dict) -> dict:
        step_times.append(time.perf_counter())
        if on_step is not None:
            on_step(step + 1, total)
        if source is not None:
            source.step(step + 1, total, callback_kwargs)
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
    if source is not None:
        source.attach(pipe.scheduler)
        kwargs["callback_on_step_end_tensor_inputs"] = list(source.tensor_inputs)
    kwargs.update({k: v for k, v in params.extra.items() if k in facts.call_parameters})
    kwargs = {k: v for k, v in kwargs.items() if k in facts.call_parameters and v is not None}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        with torch.inference_mode():
            result = pipe(**kwargs)
    finally:
        if source is not None:
            source.previews.flush()
    finished = time.perf_counter()
    frames = to_uint8_frames(result.frames)
    denoise_end = step_times[-1] if step_times else finished
    return finished_output(frames, params, device, finished - started, denoise_end - started, finished - denoise_end)
