"""Procedural clips for the grammar's scenes: exact layouts, rendered with anti-aliased shapes in torch.

Everything is vectorised over a batch so training can render its data on the GPU at no cost. Sizes are in
pixels of the clip being rendered; object sizes scale with the clip's short side, motion spans the clip.
`render_points` draws a layout at any points of space and time (what the small model learns to draw),
`render_clips` on a pixel grid of evenly spaced frames.

    layouts = sample_layouts([scene, ...], width=80, height=48, generator=torch.Generator().manual_seed(0))
    video = render_clips(layouts, width=80, height=48, num_frames=9)   # (B, T, H, W, 3) floats in [0, 1]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from studio.grammar import BACKGROUNDS, COLORS, MOTIONS, SHAPES, TRANSLATIONS, Scene

COLOR_NAMES = tuple(COLORS)
BACKGROUND_NAMES = tuple(BACKGROUNDS)
# How far a shape reaches from its center, in units of its size parameter r (the triangle reaches furthest).
EXTENT = 1.25
GAP = 0.08  # least space between two objects, in units of the short side
# How far the canonical layout's seed-drawn placement shifts a whole scene along each axis (short sides).
PLACEMENT = 0.08


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
        return self.centers_at(_phases(num_frames, self.start.device).expand(len(self.count), -1))

    def sizes(self, num_frames: int) -> torch.Tensor:
        """(B, T) size parameter per frame."""
        return self.sizes_at(_phases(num_frames, self.start.device).expand(len(self.count), -1))

    def centers_at(self, phase: torch.Tensor) -> torch.Tensor:
        """(B, N, 2, 2) object centers at phases (B, N) of the clip (0 first frame, 1 last)."""
        return self.start.unsqueeze(1) + (self.end - self.start).unsqueeze(1) * phase[..., None, None]

    def sizes_at(self, phase: torch.Tensor) -> torch.Tensor:
        """(B, N) size parameter at phases (B, N)."""
        return self.size_start.unsqueeze(1) + (self.size_end - self.size_start).unsqueeze(1) * phase


def _phases(num_frames: int, device: torch.device | str) -> torch.Tensor:
    if num_frames == 1:
        return torch.zeros(1, device=device)
    return torch.linspace(0.0, 1.0, num_frames, device=device)


def _uniform(generator: torch.Generator | None, n: int, low: torch.Tensor | float, high: torch.Tensor | float):
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    return low + (high - low) * u


VARIETIES = ("full", "canonical")


def sample_placements(n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(n, 2) seed-drawn shifts (x, y) of canonical scenes, in short sides, uniform within +-PLACEMENT."""
    return (torch.rand(n, 2, generator=generator, dtype=torch.float64) * 2.0 - 1.0).float() * PLACEMENT


def sample_layouts(
    scenes: list[Scene],
    width: int,
    height: int,
    generator: torch.Generator | None = None,
    variety: str = "full",
    placement: torch.Tensor | None = None,
) -> Layouts:
    """Random placements for scenes in a width x height clip (CPU, float64 maths, float32 result).

    variety "full": sizes 9-14% of the short side, translations travel 35-60% of the frame along their axis from
    anywhere, objects anywhere. variety "canonical" (what the shipped model learns): one layout per scene, shifted
    as a whole by `placement` ((B, 2) short sides, drawn from `generator` when not given): fixed sizes,
    translations cross the middle of the frame, objects in the middle across the motion, a pair centered and
    evenly apart. The scene and its placement decide the clip, so the model that learns it draws the shapes
    themselves rather than an average over places. Both: growing/shrinking goes from 0.5x to 1.5x (or back);
    two objects sit side by side across the motion, never touching, and move together.

    One function on purpose: its draws from `generator` come in this order, and the shipped model's clips (made from
    a seed, assets/omni-small-t2v/training.json) are the clips of that order.
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
        # A still pair sits along the longer side, side by side on a square canvas: nothing left to chance.
        sep_vertical = torch.where(translate, ~vertical_motion, torch.full((n,), height > width))
        length_sep = torch.where(sep_vertical, float(height), float(width)).double()
        length_other = torch.where(sep_vertical, float(width), float(height)).double()
        r0 = torch.where(sizing, 0.085, 0.12).double() * short
        r_max = torch.where(sizing, 1.5 * r0, r0)
        margin = EXTENT * r_max + 1.0 + PLACEMENT * short  # room for the placement
        room = (length_other - 2 * margin).clamp(min=0.0)
        travel = torch.where(translate, torch.minimum(0.5 * length_other, room), 0.0)
        other_start = length_other / 2 - sign * travel / 2
        other_end = other_start + sign * travel
        span = torch.where(count == 2, torch.maximum(2 * EXTENT * r_max + gap, 0.45 * length_sep), 0.0)
        s1, s2 = length_sep / 2 - span / 2, length_sep / 2 + span / 2
        jitter = torch.zeros(n, dtype=torch.float64)

    def xy(sep: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        x = torch.where(sep_vertical, other, sep)
        y = torch.where(sep_vertical, sep, other)
        return torch.stack([x, y], dim=-1)

    start = torch.stack([xy(s1, other_start), xy(s2, other_start + jitter)], dim=1)
    end = torch.stack([xy(s1, other_end), xy(s2, other_end + jitter)], dim=1)
    if variety == "canonical":
        shift = (sample_placements(n, generator) if placement is None else placement).double() * short
        start, end = start + shift[:, None], end + shift[:, None]
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


def render_points(layouts: Layouts, points: torch.Tensor, edge: float = 1.0) -> torch.Tensor:
    """(B, N, 3) colors in [0, 1] of the layouts at points (B, N, 3): x, y in pixels of the clip (0 at its left and
    top edges) and the phase (0 first frame, 1 last). `edge`: how many pixels a shape's border takes to blend."""
    phase = points[..., 2]
    centers = layouts.centers_at(phase)  # (B, N, 2, 2)
    sizes = layouts.sizes_at(phase)  # (B, N)
    alpha = torch.zeros_like(phase)
    for k in range(2):
        dx = points[..., 0] - centers[:, :, k, 0]
        dy = points[..., 1] - centers[:, :, k, 1]
        distance = torch.stack([_sdf(shape, dx, dy, sizes) for shape in SHAPES], dim=-1)
        distance = distance.gather(-1, layouts.shape.view(-1, 1, 1).expand(-1, distance.shape[1], 1))[..., 0]
        coverage = (0.5 - distance / edge).clamp(0.0, 1.0)
        # Objects never overlap: coverages add up to at most 1.
        alpha = alpha + torch.where((layouts.count > k)[:, None], coverage, 0.0)
    alpha = alpha.clamp(max=1.0).unsqueeze(-1)
    background = layouts.background.view(-1, 1, 3)
    return background + (layouts.color.view(-1, 1, 3) - background) * alpha


def grid_points(width: int, height: int, num_frames: int, device: torch.device | str) -> torch.Tensor:
    """(T * H * W, 3) pixel centers (x, y) and phases of a clip's pixel grid, frame by frame, row by row."""
    x = torch.arange(width, device=device, dtype=torch.float32) + 0.5
    y = torch.arange(height, device=device, dtype=torch.float32) + 0.5
    phase, y, x = torch.meshgrid(_phases(num_frames, device), y, x, indexing="ij")
    return torch.stack([x, y, phase], dim=-1).view(-1, 3)


def render_clips(layouts: Layouts, width: int, height: int, num_frames: int, edge: float = 1.0) -> torch.Tensor:
    """(B, T, H, W, 3) float32 clips in [0, 1], on the layouts' device."""
    b = layouts.count.shape[0]
    points = grid_points(width, height, num_frames, layouts.start.device).expand(b, -1, -1)
    return render_points(layouts, points, edge).view(b, num_frames, height, width, 3)


def render_scenes(
    scenes: list[Scene],
    width: int,
    height: int,
    num_frames: int,
    seed: int = 0,
    variety: str = "full",
    edge: float = 1.0,
) -> tuple[torch.Tensor, Layouts]:
    """Convenience: sample layouts with a seed and render them on the CPU."""
    layouts = sample_layouts(scenes, width, height, torch.Generator().manual_seed(seed), variety)
    return render_clips(layouts, width, height, num_frames, edge), layouts


def motion_index(name: str) -> int:
    return MOTIONS.index(name)
