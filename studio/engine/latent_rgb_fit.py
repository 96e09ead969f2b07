"""Fitting a VAE's latent-to-RGB map (studio.engine.latent_rgb) from its own decoder.

The samples look like videos: smooth procedural clips (gradients that drift, soft discs that move, colour fields
of low frequency; the fit script adds the small model's scenes) are encoded with the VAE's encoder, their latents
normalised as the pipeline holds them, and decoded again. The decoded frames, averaged over the frames and pixels
that each latent covers, are the targets; least squares from the latents (and a constant) to them is the map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

# The start-up fit: a few short clips, small enough that a real VAE decodes them in seconds.
FIT_CLIPS, FIT_FRAMES, FIT_SIZE = 6, 13, 128


@dataclass(frozen=True)
class LatentRgbFit:
    weights: torch.Tensor  # (3, C): 0-255 levels per unit of normalised latent
    bias: torch.Tensor  # (3,)
    rmse: float  # in 0-255 levels, over the samples fitted
    samples: int


def least_squares(latents: torch.Tensor, rgb: torch.Tensor) -> LatentRgbFit:
    """The affine map from latents (N, C) to RGB (N, 3) with the least squared error."""
    x = torch.cat([latents.double(), torch.ones(len(latents), 1, dtype=torch.float64)], dim=1)
    y = rgb.double()
    solution = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (C + 1, 3)
    rmse = float((x @ solution - y).pow(2).mean().sqrt())
    return LatentRgbFit(weights=solution[:-1].T.float(), bias=solution[-1].float(), rmse=rmse, samples=len(latents))


def procedural_clips(
    count: int = FIT_CLIPS, frames: int = FIT_FRAMES, width: int = FIT_SIZE, height: int = FIT_SIZE, seed: int = 0
) -> torch.Tensor:
    """(count, 3, frames, height, width) smooth clips in [-1, 1], as a VAE takes them."""
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0.0, 1.0, frames).view(frames, 1, 1)
    y = torch.linspace(0.0, 1.0, height).view(1, height, 1)
    x = torch.linspace(0.0, 1.0, width).view(1, 1, width)
    clips = []
    for _ in range(count):
        near, far = torch.rand(3, generator=g), torch.rand(3, generator=g)
        angle = float(torch.rand(1, generator=g)) * 2 * math.pi
        drift = float(torch.rand(1, generator=g)) * 0.6 - 0.3
        ramp = (math.cos(angle) * x + math.sin(angle) * y + drift * t).clamp(0.0, 1.0)  # (T, H, W)
        video = near.view(3, 1, 1, 1) + (far - near).view(3, 1, 1, 1) * ramp
        # A colour field of low frequency over space and time.
        coarse = torch.rand(1, 3, 3, 4, 4, generator=g) - 0.5
        field = torch.nn.functional.interpolate(coarse, size=(frames, height, width), mode="trilinear")[0]
        video = video + 0.4 * field
        for _ in range(2):  # soft discs that cross the frame
            color = torch.rand(3, generator=g).view(3, 1, 1, 1)
            start, end = torch.rand(2, generator=g), torch.rand(2, generator=g)
            radius = 0.08 + 0.15 * float(torch.rand(1, generator=g))
            cx, cy = start[0] + (end[0] - start[0]) * t, start[1] + (end[1] - start[1]) * t
            distance = ((x - cx) ** 2 + (y - cy) ** 2).sqrt()
            alpha = torch.sigmoid((radius - distance) / 0.02)
            video = video * (1 - alpha) + color * alpha
        clips.append(video.clamp(0.0, 1.0) * 2.0 - 1.0)
    return torch.stack(clips)


def latent_grid(video: torch.Tensor, latent_frames: int, temporal: int, spatial: int) -> torch.Tensor:
    """Decoded frames (B, 3, T, H, W) averaged onto the latent grid (B, 3, T', H / spatial, W / spatial): the first
    latent covers the first frame, each later one the `temporal` frames after the one before (a causal VAE)."""
    b, c, _, h, w = video.shape
    first = video[:, :, :1]
    rest = video[:, :, 1 : 1 + temporal * (latent_frames - 1)]
    rest = rest.reshape(b, c, latent_frames - 1, temporal, h, w).mean(dim=3)
    frames = torch.cat([first, rest], dim=2)
    hh, ww = h // spatial, w // spatial
    frames = frames[..., : hh * spatial, : ww * spatial]
    return frames.reshape(b, c, latent_frames, hh, spatial, ww, spatial).mean(dim=(4, 6))


def _stats(vae: Any, channels: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    config = vae.config
    mean = getattr(config, "latents_mean", None) or [0.0] * channels
    std = getattr(config, "latents_std", None) or [1.0] * channels
    shape = (1, channels, 1, 1, 1)
    return (
        torch.tensor(mean, dtype=torch.float32, device=device).view(shape),
        torch.tensor(std, dtype=torch.float32, device=device).view(shape),
    )


def vae_samples(vae: Any, clips: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised latents (N, C), decoded RGB on the latent grid in 0-255 levels (N, 3)) of `clips`
    (B, 3, T, H, W) in [-1, 1], one clip at a time."""
    config = vae.config
    channels = int(config.z_dim)
    temporal = int(getattr(config, "scale_factor_temporal", 4))
    spatial = int(getattr(config, "scale_factor_spatial", 8))
    device, dtype = vae.device, vae.dtype
    mean, std = _stats(vae, channels, device)
    latents, targets = [], []
    with torch.inference_mode():
        for clip in clips.split(1):
            z = vae.encode(clip.to(device, dtype)).latent_dist.mode()
            decoded = vae.decode(z, return_dict=False)[0].float()
            levels = (decoded.clamp(-1.0, 1.0) + 1.0) * 127.5
            target = latent_grid(levels, z.shape[2], temporal, spatial)
            normalised = (z.float() - mean) / std
            normalised = normalised[..., : target.shape[3], : target.shape[4]]
            latents.append(normalised.permute(0, 2, 3, 4, 1).reshape(-1, channels).cpu())
            targets.append(target.permute(0, 2, 3, 4, 1).reshape(-1, 3).cpu())
    return torch.cat(latents), torch.cat(targets)


def fit_vae(vae: Any, clips: torch.Tensor | None = None) -> LatentRgbFit:
    """The VAE's map, fitted on `clips` (default: the procedural ones)."""
    return least_squares(*vae_samples(vae, procedural_clips() if clips is None else clips))
