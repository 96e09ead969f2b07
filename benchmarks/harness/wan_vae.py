"""Wan 2.1's VAE as the VAE benchmarks decode with, and the frames' difference in uint8 levels (every benchmark that
compares videos reports it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from benchmarks.harness import ROOT


def benchmark_vae(device: str, smoke: bool) -> Any:
    """Wan 2.1's VAE (diffusers' defaults) with random weights, or the tiny one of assets/ for a smoke run; bf16 and
    channels-last weights on a GPU (the layout the engine picks on an H200 at these sizes), float32 on a CPU."""
    from diffusers import AutoencoderKLWan

    from studio.engine.vae_decode import conv_weights_channels_last

    torch.manual_seed(0)
    vae = AutoencoderKLWan.from_pretrained(ROOT / "assets" / "tiny-wan" / "vae") if smoke else AutoencoderKLWan()
    vae = vae.to(device, torch.bfloat16 if device == "cuda" else torch.float32).eval()
    if device == "cuda":
        conv_weights_channels_last(vae, True)
    return vae


def fidelity(frames: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Mean and largest difference in uint8 levels, and PSNR, of `frames` against `reference`."""
    difference = np.abs(frames.astype(np.float64) - reference.astype(np.float64))
    mse = float(np.mean(difference**2))
    return {
        "mean_levels": round(float(difference.mean()), 3),
        "max_levels": int(difference.max()),
        "psnr_db": round(10 * math.log10(255.0**2 / mse), 2) if mse > 0 else float("inf"),
    }
