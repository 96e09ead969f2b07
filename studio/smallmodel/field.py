"""A conditional video field as the small model's denoiser: every pixel of every key frame is predicted by one
small MLP from its own coordinates (x, y in units of the short side, t in [-1, 1]), its noisy value, the noise
level and the prompt, with the prompt and noise level modulating every layer (FiLM).

Why a field: in the grammar's clips an object's place is a simple function of time that the prompt sets
(start + velocity x t, or a size that grows). A FiLM layer can scale the t coordinate by a prompt-set velocity,
so "left" and "right" are different slopes of the same feature, learned from a few thousand clips; and a field
knows nothing of absolute pixel grids, so one model draws any aspect ratio. A 3x3 convolution over the
noisy clip lets each pixel see its neighbourhood, which keeps the sampler's intermediate clips coherent.

The network predicts the clean clip (prediction "sample"); the pipeline turns that into flow steps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn


def _fourier(values: torch.Tensor, frequencies: int) -> torch.Tensor:
    """(..., C) -> (..., C * 2 * frequencies): sin and cos at 1, 2, 4, ... times pi."""
    scales = (2.0 ** torch.arange(frequencies, device=values.device, dtype=values.dtype)) * math.pi
    angles = values[..., None] * scales
    return torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(-2)


class OmniFieldDenoiser(ModelMixin, ConfigMixin):
    """(noisy clip (B, 3, K, H, W) in [-1, 1], sigma (B,), prompt states (B, L, D), mask (B, L)) -> clean clip."""

    @register_to_config
    def __init__(
        self,
        in_channels: int = 3,
        num_frames: int = 9,
        text_dim: int = 64,
        width: int = 96,
        depth: int = 4,
        cond_dim: int = 128,
        frequencies: int = 4,
        prediction: str = "sample",
        moving_coordinates: bool = True,
    ) -> None:
        super().__init__()
        if prediction != "sample":
            raise ValueError("the field denoiser predicts the clean clip (prediction='sample')")
        coords = 3 + 3 * 2 * frequencies
        if moving_coordinates:
            # The prompt's motion as numbers (x and y velocity in short sides per half clip, log growth): pixels
            # also see their coordinates in a frame that moves and scales with the object, where it stands still.
            self.motion = nn.Sequential(nn.Linear(text_dim, cond_dim), nn.SiLU(), nn.Linear(cond_dim, 3))
            coords += 2 + 2 * 2 * frequencies
        else:
            self.motion = None
        self.text = nn.Sequential(nn.Linear(text_dim, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))
        self.noise = nn.Sequential(nn.Linear(16, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))
        self.look = nn.Conv2d(in_channels, 8, 3, padding=1)  # each pixel's noisy neighbourhood
        self.stem = nn.Linear(coords + in_channels + 8, width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.film = nn.Linear(cond_dim, 2 * width * (depth + 1))
        self.head = nn.Linear(width, in_channels)
        nn.init.normal_(self.film.weight, std=0.02)
        nn.init.zeros_(self.film.bias)

    @property
    def size_multiple(self) -> int:
        return 1

    @staticmethod
    def pooled(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.to(states.dtype).unsqueeze(-1)
        return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    def predict_motion(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, 3): x velocity, y velocity (short sides per half clip), log growth per half clip."""
        return self.motion(self.pooled(states, mask))

    def condition(self, sigma: torch.Tensor, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, cond_dim): the mean of the prompt's word states (a bag of words) plus the noise level."""
        pooled = self.pooled(states, mask)
        noise = _fourier(sigma.float().view(-1, 1) * 4.0, 8).to(states.dtype)
        return F.silu(self.text(pooled) + self.noise(noise))

    @staticmethod
    def coordinates(frames: int, height: int, width: int, device, dtype) -> torch.Tensor:
        """(K, H, W, 3): x and y in units of the short side from the centre, t from -1 to 1."""
        short = float(min(height, width))
        xs = (torch.arange(width, device=device, dtype=dtype) + 0.5 - width / 2) / short
        ys = (torch.arange(height, device=device, dtype=dtype) + 0.5 - height / 2) / short
        ts = torch.linspace(-1.0, 1.0, frames, device=device, dtype=dtype) if frames > 1 else torch.zeros(1)
        t, y, x = torch.meshgrid(ts.to(device, dtype), ys, xs, indexing="ij")
        return torch.stack([x, y, t], dim=-1)

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        pixels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The clean clip (B, 3, K, H, W); with `pixels` (B, N) indices into the flattened K*H*W grid, only those
        pixels (B, N, 3): training needs a few thousand pixels of many clips, not every pixel of a few."""
        b, c, k, h, w = sample.shape
        sigma = timestep.reshape(-1).expand(b) if timestep.numel() == 1 else timestep.reshape(-1)
        cond = self.condition(sigma, encoder_hidden_states, encoder_attention_mask)  # (B, C)
        coords = self.coordinates(k, h, w, sample.device, sample.dtype)
        features = torch.cat([coords, _fourier(coords, self.config.frequencies)], dim=-1).expand(b, -1, -1, -1, -1)
        if self.motion is not None:
            motion = self.predict_motion(encoder_hidden_states, encoder_attention_mask).to(sample.dtype)
            t = coords[..., 2][None]
            shrink = torch.exp(-motion[:, 2].view(-1, 1, 1, 1) * t)
            mx = (coords[..., 0][None] - motion[:, 0].view(-1, 1, 1, 1) * t) * shrink
            my = (coords[..., 1][None] - motion[:, 1].view(-1, 1, 1, 1) * t) * shrink
            moved = torch.stack([mx, my], dim=-1)
            features = torch.cat([features, moved, _fourier(moved, self.config.frequencies)], dim=-1)
        frames = sample.permute(0, 2, 1, 3, 4).reshape(b * k, c, h, w)
        around = self.look(frames).view(b, k, 8, h, w).permute(0, 1, 3, 4, 2)  # (B, K, H, W, 8)
        values = sample.permute(0, 2, 3, 4, 1)  # (B, K, H, W, 3)
        x = torch.cat([features, values, around], dim=-1).reshape(b, k * h * w, -1)
        if pixels is not None:
            x = torch.gather(x, 1, pixels[..., None].expand(-1, -1, x.shape[-1]))
        films = self.film(cond).view(b, len(self.layers) + 1, 2, -1)
        x = self.stem(x)
        for i in range(len(self.layers) + 1):
            scale, shift = films[:, i, 0], films[:, i, 1]
            x = F.silu(x * (1.0 + scale[:, None, :]) + shift[:, None, :])
            if i < len(self.layers):
                x = self.layers[i](x)
        out = torch.tanh(self.head(x))
        if pixels is not None:
            return out
        return out.view(b, k, h, w, c).permute(0, 4, 1, 2, 3).contiguous()
