"""Frames as the engine hands them on: uint8 (T, H, W, 3) at the requested size, from whatever a pipeline or
the VAE made, and the output of one finished generation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from studio.engine.generation_types import GenerationOutput, GenerationParams
from studio.engine.resize import resize_frames

__all__ = ["finished_output", "resize_frames", "to_uint8_frames", "to_uint8_tensor"]


def to_uint8_tensor(video: torch.Tensor) -> torch.Tensor:
    """A decoded batch (B, C, T, H, W) in [-1, 1] -> uint8 (B, T, H, W, C) on its device, rounded as
    `to_uint8_frames` rounds the pipeline's own float output (only uint8 needs to cross to the host)."""
    video = (video / 2 + 0.5).clamp(0, 1)  # the pipeline's video processor, in the VAE's dtype
    video = (video.float() * 255.0 + 0.5).to(torch.uint8)
    return video.permute(0, 2, 3, 4, 1).contiguous()


def to_uint8_frames(frames: Any) -> np.ndarray:
    """Pipelines return (B, T, H, W, C) floats in [0, 1], a list of those, or PIL frames: take video 0."""
    if isinstance(frames, torch.Tensor):
        frames = frames.float().cpu().numpy()
    if isinstance(frames, list):
        frames = frames[0]
        if isinstance(frames, list):  # PIL images
            frames = np.stack([np.asarray(image.convert("RGB")) for image in frames])
    array = np.asarray(frames)
    if array.ndim == 5:
        array = array[0]
    if array.dtype != np.uint8:
        array = (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return np.ascontiguousarray(array)


def unpatchify_video(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    return unpatchify(x, patch_size=patch_size)


def finished_output(
    frames: np.ndarray,
    params: GenerationParams,
    device: str,
    inference_s: float,
    denoise_s: float,
    decode_s: float,
    batch_size: int = 1,
) -> GenerationOutput:
    """One generation's output at the requested size. A pipeline may make its own native size (the project's small
    model does): its frames are kept as made and resized a few at a time as they are read (`GenerationOutput.chunks`),
    so the clip at the requested size never needs to be in memory whole."""
    native_w, native_h = frames.shape[2], frames.shape[1]
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return GenerationOutput(
        made=frames,
        size=(params.width, params.height),
        native_size=(native_w, native_h),
        inference_time_s=inference_s,
        stage_durations={"denoise": denoise_s, "decode": decode_s},
        peak_memory_mb=peak,
        batch_size=batch_size,
    )
