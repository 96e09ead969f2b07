"""Procedural clips for the grammar's scenes: exact layouts, rendered with anti-aliased shapes in torch.

Everything is vectorised over a batch so training can render its data on the GPU at no cost. Sizes are in
pixels of the clip being rendered; object sizes scale with the clip's short side, motion spans the clip.

    layouts = sample_layouts([scene, ...], width=80, height=48, generator=torch.Generator().manual_seed(0))
    video = render_clips(layouts, width=80, height=48, num_frames=9)   # (B, T, H, W, 3) floats in [0, 1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from studio.smallmodel.grammar import BACKGROUNDS, COLORS, MOTIONS, SHAPES, TRANSLATIONS, Scene

COLOR_NAMES = tuple(COLORS)
BACKGROUND_NAMES = tuple(BACKGROUNDS)
# How far a shape reaches from its center, in units of its size parameter r (the triangle reaches furthest).
EXTENT = 1.25
GAP = 0.08  # least space between two objects, in units of the short side


@dataclass
class Layouts:
    """Per clip b and object k (k < count[b]): center and size parameter at the first and last frame."""

    count: torch.Tensor  # (B,) long, 1 or 2
    color: torch.Tensor  # (B, 3) float RGB in [0, 1]
    background: torch.Tensor  # (B, 3) float RGB in [0, 1]
    shape: torch.Tensor  # (B,) long index into SHAPES
    start: torch.Tensor  # (B, 2, 2) float (x, y) centers at frame 0 for object 0 and 1
    end: torch.Tensor  # (B, 2, 2) float (x, y) centers at the last frame
    size_start: torch.Tensor  # (B,) float size parameter r at frame 0
    size_end: torch.Tensor  # (B,) float at the last frame

    def to(self, device: torch.device | str) -> Layouts:
        return Layouts(**{name: value.to(device) for name, value in vars(self).items()})

    def centers(self, num_frames: int) -> torch.Tensor:
        """(B, T, 2, 2) object centers per frame."""
        phase = _phases(num_frames, self.start.device).view(1, -1, 1, 1)
        return self.start.unsqueeze(1) + (self.end - self.start).unsqueeze(1) * phase

    def sizes(self, num_frames: int) -> torch.Tensor:
        """(B, T) size parameter per frame."""
        phase = _phases(num_frames, self.start.device).view(1, -1)
        return self.size_start.unsqueeze(1) + (self.size_end - self.size_start).unsqueeze(1) * phase


def _phases(num_frames: int, device: torch.device | str) -> torch.Tensor:
    if num_frames == 1:
        return torch.zeros(1, device=device)
    return torch.linspace(0.0, 1.0, num_frames, device=device)


def _uniform(generator: torch.Generator | None, n: int, low: torch.Tensor | float, high: torch.Tensor | float):
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    return low + (high - low) * u


VARIETIES = ("full", "canonical")


def sample_layouts(
    scenes: list[Scene], width: int, height: int, generator: torch.Generator | None = None, variety: str = "full"
) -> Layouts:
    """Random placements for scenes in a width x height clip (CPU, float64 maths, float32 result).

    variety "full": sizes 9-14% of the short side, translations travel 35-60% of the frame along their axis from
    anywhere, objects anywhere. variety "canonical" (what the shipped model learns; fewer choices, so a small net
    learns it from little data): fixed sizes, translations cross the middle half of the frame (25% -> 75%), objects
    near the middle across the motion, a pair centered and evenly apart. Both: growing/shrinking goes from 0.5x to
    1.5x (or back); two objects sit side by side across the motion, never touching, and move together.
    """
    if variety not in VARIETIES:
        raise ValueError(f"variety must be one of {VARIETIES}, got {variety!r}")
    n = len(scenes)
    short = float(min(width, height))
    count = torch.tensor([s.count for s in scenes])
    motion = [s.motion for s in scenes]
    translate = torch.tensor([m in TRANSLATIONS for m in motion])
    sizing = torch.tensor([m in ("growing", "shrinking") for m in motion])
    sign = torch.tensor([float(sum(TRANSLATIONS.get(m, (0, 0)))) for m in motion], dtype=torch.float64)
    vertical_motion = torch.tensor([TRANSLATIONS.get(m, (0, 0))[1] != 0 for m in motion])

    r0 = torch.where(sizing, _uniform(generator, n, 0.07, 0.10), _uniform(generator, n, 0.09, 0.14)) * short
    r_max = torch.where(sizing, 1.5 * r0, r0)
    margin = EXTENT * r_max + 1.0
    gap = GAP * short

    # The separation axis holds the two objects apart: across the motion, or the longer side when not moving.
    square = width == height
    long_is_vertical = torch.rand(n, generator=generator) < 0.5 if square else torch.full((n,), height > width)
    sep_vertical = torch.where(translate, ~vertical_motion, long_is_vertical)
    length_sep = torch.where(sep_vertical, float(height), float(width)).double()
    length_other = torch.where(sep_vertical, float(width), float(height)).double()

    # Along the other axis: the motion (or a fixed place).
    room = (length_other - 2 * margin).clamp(min=0.0)
    travel = torch.where(translate, torch.minimum(_uniform(generator, n, 0.35, 0.6) * length_other, room), 0.0)
    low = margin
    a0 = _uniform(generator, n, low, low + (room - travel).clamp(min=0.0))
    other_start = torch.where(sign < 0, a0 + travel, a0)
    other_end = other_start + sign * travel

    # Along the separation axis: one object anywhere, two objects apart.
    span = torch.where(count == 2, 2 * EXTENT * r_max + gap, 0.0)
    free = (length_sep - 2 * margin - span).clamp(min=0.0)
    s1 = margin + _uniform(generator, n, 0.0, 1.0) * free
    s2_low = s1 + span
    s2 = s2_low + _uniform(generator, n, 0.0, 1.0) * (length_sep - margin - s2_low).clamp(min=0.0)
    s2 = torch.where(count == 2, s2, s1)
    # The second object may lag or lead a little along the other axis (inside the frame).
    jitter = _uniform(generator, n, -0.06, 0.06) * length_other
    lo = margin - torch.minimum(other_start, other_end)
    hi = (length_other - margin) - torch.maximum(other_start, other_end)
    jitter = torch.minimum(torch.maximum(jitter, lo), hi)
    jitter = torch.where(count == 2, jitter, 0.0)

    if variety == "canonical":
        r0 = torch.where(sizing, 0.085, 0.12).double() * short
        r_max = torch.where(sizing, 1.5 * r0, r0)
        margin = EXTENT * r_max + 1.0
        room = (length_other - 2 * margin).clamp(min=0.0)
        travel = torch.where(translate, torch.minimum(0.5 * length_other, room), 0.0)
        middle = length_other / 2 + torch.where(translate, 0.0, _uniform(generator, n, -0.1, 0.1) * length_other)
        other_start = middle - sign * travel / 2
        other_end = other_start + sign * travel
        span = torch.where(count == 2, torch.maximum(2 * EXTENT * r_max + gap, 0.45 * length_sep), 0.0)
        center = length_sep / 2 + _uniform(generator, n, -0.15, 0.15) * length_sep * torch.where(count == 2, 0.3, 1.0)
        center = torch.minimum(torch.maximum(center, margin + span / 2), length_sep - margin - span / 2)
        s1, s2 = center - span / 2, center + span / 2
        jitter = torch.zeros(n, dtype=torch.float64)

    def xy(sep: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        x = torch.where(sep_vertical, other, sep)
        y = torch.where(sep_vertical, sep, other)
        return torch.stack([x, y], dim=-1)

    start = torch.stack([xy(s1, other_start), xy(s2, other_start + jitter)], dim=1)
    end = torch.stack([xy(s1, other_end), xy(s2, other_end + jitter)], dim=1)
    grow = torch.tensor([m == "growing" for m in motion])
    shrink = torch.tensor([m == "shrinking" for m in motion])
    size_start = torch.where(grow, 0.5 * r0, torch.where(shrink, 1.5 * r0, r0))
    size_end = torch.where(grow, 1.5 * r0, torch.where(shrink, 0.5 * r0, r0))
    return Layouts(
        count=count,
        color=torch.tensor([COLORS[s.color] for s in scenes], dtype=torch.float32) / 255.0,
        background=torch.tensor([BACKGROUNDS[s.background] for s in scenes], dtype=torch.float32) / 255.0,
        shape=torch.tensor([SHAPES.index(s.shape) for s in scenes]),
        start=start.float(),
        end=end.float(),
        size_start=size_start.float(),
        size_end=size_end.float(),
    )


def _sdf(shape: str, dx: torch.Tensor, dy: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Approximate signed distance (pixels) to a shape of size r centered at dx = dy = 0."""
    if shape == "circle":
        return torch.sqrt(dx * dx + dy * dy) - r
    adx = dx.abs()
    if shape == "square":
        return torch.maximum(adx, dy.abs()) - 0.88 * r
    if shape == "diamond":
        return (adx + dy.abs() - 1.22 * r) / math.sqrt(2.0)
    # Upward equilateral triangle of inradius rho, its bounding box centered on the center.
    rho = 0.72 * r
    ty = dy - 0.5 * rho
    return torch.maximum(ty - rho, (math.sqrt(3.0) / 2.0) * adx - 0.5 * ty - rho)


def render_clips(layouts: Layouts, width: int, height: int, num_frames: int) -> torch.Tensor:
    """(B, T, H, W, 3) float32 clips in [0, 1], on the layouts' device."""
    device = layouts.start.device
    centers = layouts.centers(num_frames)  # (B, T, 2, 2)
    sizes = layouts.sizes(num_frames)  # (B, T)
    x = (torch.arange(width, device=device, dtype=torch.float32) + 0.5).view(1, 1, 1, -1)
    y = (torch.arange(height, device=device, dtype=torch.float32) + 0.5).view(1, 1, -1, 1)
    b = layouts.count.shape[0]
    alpha = torch.zeros(b, num_frames, height, width, device=device)
    # Each shape's distance function only over the clips (and objects) that have it.
    for index, shape in enumerate(SHAPES):
        for k in range(2):
            chosen = torch.nonzero((layouts.shape == index) & (layouts.count > k)).flatten()
            if chosen.numel() == 0:
                continue
            c = centers[chosen, :, k]  # (n, T, 2)
            dx = x - c[:, :, 0, None, None]
            dy = y - c[:, :, 1, None, None]
            r = sizes[chosen][:, :, None, None]
            coverage = (0.5 - _sdf(shape, dx, dy, r)).clamp(0.0, 1.0)
            # Objects never overlap: coverages add up to at most 1.
            alpha.index_add_(0, chosen, coverage)
    alpha = alpha.clamp(max=1.0).unsqueeze(-1)
    background = layouts.background.view(-1, 1, 1, 1, 3)
    return background + (layouts.color.view(-1, 1, 1, 1, 3) - background) * alpha


def render_scenes(
    scenes: list[Scene], width: int, height: int, num_frames: int, seed: int = 0, variety: str = "full"
) -> tuple[torch.Tensor, Layouts]:
    """Convenience: sample layouts with a seed and render them on the CPU."""
    layouts = sample_layouts(scenes, width, height, torch.Generator().manual_seed(seed), variety)
    return render_clips(layouts, width, height, num_frames), layouts


def motion_index(name: str) -> int:
    return MOTIONS.index(name)
