"""A conditional video field as the small model's denoiser: the clean color at every point of the clip is predicted
by one small MLP from its own coordinates (x, y in units of the short side, t in [-1, 1]), the canvas's half width
and height, the noisy clip's value there, the noise level and the prompt, with the prompt and noise level
modulating every layer (FiLM).

Why a field: in the grammar's clips an object's place is a simple function of time that the prompt sets
(start + velocity x t, or a size that grows). A FiLM layer can scale the t coordinate by a prompt-set velocity,
so "left" and "right" are different slopes of the same feature, learned from a few thousand clips; and a field
knows nothing of absolute pixel grids, so one model draws any aspect ratio (told the canvas's shape, since where a
scene goes depends on it). A 3x3 convolution over the
noisy clip lets each pixel see its neighbourhood, which keeps the sampler's intermediate clips coherent.

A field is continuous: it is trained on points anywhere in space and time, its noisy inputs read between the
pixels and key frames of the noisy clip (trilinear), and its targets drawn exactly there. So it draws any point:
the pipeline makes key frames on a small canvas, then draws every requested frame on a larger one from them;
the frames between key frames are the motion itself, not a blend of two key frames. A scene's placement (a
shift of the whole scene, drawn from the seed) moves the coordinates the field sees.

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
        frequencies: int = 6,
        prediction: str = "sample",
        moving_coordinates: bool = True,
    ) -> None:
        super().__init__()
        if prediction != "sample":
            raise ValueError("the field denoiser predicts the clean clip (prediction='sample')")
        coords = 3 + 3 * 2 * frequencies + 2  # + the canvas's half width and height (its layout depends on them)
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

    @staticmethod
    def sample_at(grid_values: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
        """(B, C, K, H, W) values of a clip's pixels and key frames -> (B, N, C) trilinear values at points (B, N, 3)
        in field coordinates (pixel centers and key frames as `coordinates` places them; clamped at the edges)."""
        k, h, w = grid_values.shape[-3:]
        short = float(min(h, w))
        frame = (points[..., 2] + 1.0) / 2.0 * (k - 1)
        # grid_sample's normalized coordinates (align_corners=False: -1 and 1 are the outer edges of the grid)
        where = torch.stack(
            [2.0 * points[..., 0] * short / w, 2.0 * points[..., 1] * short / h, (2.0 * frame + 1.0) / k - 1.0],
            dim=-1,
        )
        values = F.grid_sample(
            grid_values, where[:, None, None], mode="bilinear", padding_mode="border", align_corners=False
        )  # (B, C, 1, 1, N)
        return values[:, :, 0, 0].transpose(1, 2)

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        points: torch.Tensor | None = None,
        placement: torch.Tensor | None = None,
        grid: tuple[int, int, int] | None = None,
    ) -> torch.Tensor:
        """The clean clip (B, 3, K, H, W) at the noisy clip's own pixels and key frames.

        `points` (B, N, 3) in field coordinates: only there (B, N, 3) (training draws a few thousand points of many
        clips, not every pixel of a few). `grid` (frames, height, width): on that grid instead (B, 3, T, H', W'),
        the same canvas drawn finer or coarser. `placement` (B, 2): the scene's shift in short sides (default 0)."""
        b, c, k, h, w = sample.shape
        sigma = timestep.reshape(-1).expand(b) if timestep.numel() == 1 else timestep.reshape(-1)
        cond = self.condition(sigma, encoder_hidden_states, encoder_attention_mask)  # (B, C)
        frames = sample.permute(0, 2, 1, 3, 4).reshape(b * k, c, h, w)
        around = self.look(frames).view(b, k, 8, h, w).permute(0, 2, 1, 3, 4)  # (B, 8, K, H, W)
        observed = torch.cat([sample, around], dim=1)  # what each pixel sees of the noisy clip
        if grid is not None and tuple(grid) != (k, h, w):
            points = self.coordinates(*grid, sample.device, sample.dtype).view(1, -1, 3).expand(b, -1, -1)
        if points is None:
            coords = self.coordinates(k, h, w, sample.device, sample.dtype).view(1, -1, 3).expand(b, -1, -1)
            seen = observed.flatten(2).transpose(1, 2)  # (B, K*H*W, 3 + 8)
        else:
            coords = points.to(sample.dtype)
            seen = self.sample_at(observed, coords)
        if placement is not None:
            coords = torch.cat([coords[..., :2] - placement.to(coords.dtype)[:, None], coords[..., 2:]], dim=-1)
        # A pixel alone cannot tell a wide canvas from a tall one, and where the scene goes depends on that.
        canvas = torch.tensor([w / 2.0, h / 2.0], device=sample.device, dtype=sample.dtype) / float(min(h, w))
        features = [coords, _fourier(coords, self.config.frequencies), canvas.expand(*coords.shape[:-1], 2)]
        if self.motion is not None:
            motion = self.predict_motion(encoder_hidden_states, encoder_attention_mask).to(sample.dtype)
            t = coords[..., 2]
            shrink = torch.exp(-motion[:, 2:3] * t)
            moved = torch.stack(
                [(coords[..., 0] - motion[:, 0:1] * t) * shrink, (coords[..., 1] - motion[:, 1:2] * t) * shrink], dim=-1
            )
            features += [moved, _fourier(moved, self.config.frequencies)]
        x = torch.cat([*features, seen], dim=-1)
        films = self.film(cond).view(b, len(self.layers) + 1, 2, -1)
        x = self.stem(x)
        for i in range(len(self.layers) + 1):
            scale, shift = films[:, i, 0], films[:, i, 1]
            x = F.silu(x * (1.0 + scale[:, None, :]) + shift[:, None, :])
            if i < len(self.layers):
                x = self.layers[i](x)
        out = torch.tanh(self.head(x))
        if points is not None and grid is None:
            return out
        size = tuple(grid) if grid is not None else (k, h, w)
        return out.view(b, *size, c).permute(0, 4, 1, 2, 3).contiguous()
