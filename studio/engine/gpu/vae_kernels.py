"""The VAE walk's norm, SiLU and causal join in one Triton kernel (for studio.engine.vae_fused, on a GPU).

Before each causal convolution of Wan 2.1's decoder the walk takes SiLU(RMS norm(x)) and joins it after the two
cached frames of the previous latent frame. Compiled by torch with dynamic shapes that is two passes (the norm over
rows of pixels, then the join's copy), and the norm's kernel, generic over every channel count and size, runs
well below the card's copy bandwidth (benchmarks/experiments/vae_decode_gpu.py's profile; benchmarks/RESULTS.md,
the VAE decode). Here one kernel reads each pixel's channels once (in channels-last order a pixel's channels are
one row; every channel count of the decoder, 96 to 384, fits a block of rows in registers), normalises, scales,
applies the gain and the SiLU, and writes the row once, at its place in the joined buffer the convolution takes;
only the two cached frames are copied apart.

The roundings are diffusers' (`WanRMS_norm`: to the activation's dtype after the normalisation, after the scale,
after the gain; then the SiLU in that dtype). The walk checks the kernel on the GPU against its torch version before
it takes it (`studio.engine.vae_fused.kernel_problem`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

# Frames of a causal convolution's input the next latent frame needs (diffusers' CACHE_T): its kernel is 3 deep.
CACHE_FRAMES = 2
# Elements a program holds (rows x the channel block): 32 rows of 96 (128) channels, 8 of 384 (512).
PROGRAM_ELEMENTS = 4096


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def omni_vae_norm_silu_join(
        x_ptr,
        gamma_ptr,
        out_ptr,
        scale,
        rows,
        video_rows,
        skip_rows,
        channels,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_C: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        column = tl.arange(0, BLOCK_C)
        column_ok = column < channels
        mask = (row < rows)[:, None] & column_ok[None, :]
        x = tl.load(x_ptr + row[:, None] * channels + column[None, :], mask=mask, other=0.0).to(tl.float32)
        norm = tl.maximum(tl.sqrt(tl.sum(x * x, axis=1)), 1e-12)
        dtype = out_ptr.dtype.element_ty
        y = (x / norm[:, None]).to(dtype).to(tl.float32)
        y = (y * scale).to(dtype).to(tl.float32)
        gamma = tl.load(gamma_ptr + column, mask=column_ok, other=0.0).to(tl.float32)
        y = (y * gamma[None, :]).to(dtype).to(tl.float32)
        y = y * tl.sigmoid(y)
        # Video v's rows land after its own cached frames: v's joined frames start at v * (video_rows + skip_rows).
        target = row + (row // video_rows + 1) * skip_rows
        tl.store(out_ptr + target[:, None] * channels + column[None, :], y.to(dtype), mask=mask)

    return omni_vae_norm_silu_join


def joined_buffer(x: torch.Tensor) -> torch.Tensor:
    """An empty (B, C, CACHE_FRAMES + T, H, W) channels-last buffer for `x`'s join."""
    b, c, t, h, w = x.shape
    return torch.empty(
        (b, c, CACHE_FRAMES + t, h, w), dtype=x.dtype, device=x.device, memory_format=torch.channels_last_3d
    )


def norm_silu_join_into(
    x: torch.Tensor, cached: torch.Tensor, gamma: torch.Tensor, scale: float, joined: torch.Tensor
) -> torch.Tensor:
    """`joined` (from `joined_buffer`): `cached` (B, C, CACHE_FRAMES, H, W), then SiLU(RMS norm(x)) of x
    (B, C, T, H, W) over its channels, times `scale` and `gamma` (C,)."""
    b, c, t, h, w = x.shape
    x = x.contiguous(memory_format=torch.channels_last_3d)
    joined[:, :, :CACHE_FRAMES].copy_(cached)
    rows = b * t * h * w
    block_c = 1 << max(4, (c - 1).bit_length())
    block_rows = max(1, PROGRAM_ELEMENTS // block_c)
    _kernel()[(-(-rows // block_rows),)](
        x,
        gamma.contiguous(),
        joined,
        float(scale),
        rows,
        t * h * w,
        CACHE_FRAMES * h * w,
        c,
        BLOCK_ROWS=block_rows,
        BLOCK_C=block_c,
        num_warps=4,
    )
    return joined


def norm_silu_join(x: torch.Tensor, cached: torch.Tensor, gamma: torch.Tensor, scale: float) -> torch.Tensor:
    return norm_silu_join_into(x, cached, gamma, scale, joined_buffer(x))
