"""Reading a decoded video back into the grammar's terms: the dominant moving object's color, its motion, how
many objects there are, their shape and how many separate pieces each frame shows. Used by the quality benchmark
and the tests; works on any model's output.

    reading = read_video(frames)            # frames: uint8 (T, H, W, 3) at any size
    reading.color, reading.motion, reading.count, reading.shape, reading.pieces

Method: scale to a short side of 48 px; take the background as the per-channel median of the first, middle and last
frame; call a pixel foreground when a channel differs from the background by more than 0.25; label 4-connected
components per frame. The count is the median number of components (>= 3 px) per frame; the dominant object is the
largest component of the middle frame, tracked through the clip by nearest centroid. Its color is the palette color
nearest to the median of its strongest pixels; its motion compares the first and last quarter of the clip: area up
(or down) by 1.6x -> growing (shrinking), else centroid moved less than 8% of the frame -> still, else the larger of
the horizontal and vertical displacement gives left/right/up/down.

Pieces: the number of components per frame (a merge, a split or a speck changes it). Shape: each component of
at least SHAPE_MIN_AREA px is measured on its coverage (how far each pixel is from the background towards the
object's color, 0 to 1): its fill of its bounding box (area over the product of the box's soft width and height,
the columns' and rows' largest coverage summed) and how far its mass sits below the middle of its box, in box
heights. A square fills its box (1), a circle about pi / 4, an upward triangle and a diamond half of it; the
triangle's mass sits a sixth of its height low, the diamond's in the middle. Every measured component votes;
the shape with most votes is the video's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from studio.grammar import COLORS

ANALYSIS_SHORT_SIDE = 48
FOREGROUND_THRESHOLD = 0.25
MIN_AREA = 3
GROWTH_RATIO = 1.6
STILL_DISPLACEMENT = 0.08
SHAPE_MIN_AREA = 16
SQUARE_FILL = 0.89  # a square fills its box (1.0), a circle pi / 4 = 0.785
CIRCLE_FILL = 0.65  # a circle 0.785, a diamond or a triangle 0.5
LOW_MASS = 0.08  # an upward triangle's mass sits 1/6 of its height below its box's middle, the others' at it

_PALETTE_NAMES = tuple(COLORS)
_PALETTE = torch.tensor([COLORS[name] for name in _PALETTE_NAMES], dtype=torch.float32) / 255.0


@dataclass
class VideoReading:
    color: str | None
    motion: str | None
    count: int
    shape: str | None = None
    pieces: list[int] = field(default_factory=list)  # components per frame
    details: dict = field(default_factory=dict)


def shape_of(fill: float, low_mass: float) -> str:
    """The grammar's shape with this fill of its bounding box and mass offset below the box's middle."""
    if low_mass > LOW_MASS:
        return "triangle"
    if fill >= SQUARE_FILL:
        return "square"
    return "circle" if fill >= CIRCLE_FILL else "diamond"


def measure_shape(coverage: torch.Tensor) -> tuple[float, float]:
    """(fill of the bounding box, mass offset below the box's middle in box heights) of one object's coverage
    (h, w) in [0, 1]."""
    columns, rows = coverage.amax(dim=0), coverage.amax(dim=1)
    width, height = float(columns.sum()), float(rows.sum())
    area = float(coverage.sum())
    ys = torch.arange(coverage.shape[0], dtype=coverage.dtype)
    mass_y = float((coverage.sum(dim=1) * ys).sum()) / max(area, 1e-6)
    box_middle = float((rows * ys).sum()) / max(height, 1e-6)
    return area / max(width * height, 1e-6), (mass_y - box_middle) / max(height, 1e-6)


def _downscale(frames: np.ndarray) -> torch.Tensor:
    """uint8 (T, H, W, 3) -> float (T, 3, h, w) in [0, 1] with short side ANALYSIS_SHORT_SIDE (area average)."""
    video = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    h, w = video.shape[-2:]
    scale = ANALYSIS_SHORT_SIDE / min(h, w)
    if scale < 1.0:
        size = (max(1, round(h * scale)), max(1, round(w * scale)))
        video = F.interpolate(video, size=size, mode="bilinear", antialias=True, align_corners=False)
    return video.clamp(0.0, 1.0)


def label_components(mask: torch.Tensor) -> torch.Tensor:
    """4-connected component labels of a boolean (T, H, W) mask: 0 background, equal positive ids per component."""
    t, h, w = mask.shape
    ids = torch.arange(1, h * w + 1, dtype=torch.int64).view(1, h, w).expand(t, h, w)
    labels = torch.where(mask, ids, torch.zeros_like(ids))
    for _ in range(h * w):
        padded = F.pad(labels, (1, 1, 1, 1))
        neighbours = torch.stack(
            [labels, padded[:, :-2, 1:-1], padded[:, 2:, 1:-1], padded[:, 1:-1, :-2], padded[:, 1:-1, 2:]]
        ).amax(dim=0)
        updated = torch.where(mask, neighbours, labels)
        if torch.equal(updated, labels):
            break
        labels = updated
    return labels


def _coverage(where: torch.Tensor, image: torch.Tensor, color: torch.Tensor, background: torch.Tensor):
    """(h, w) coverage in [0, 1] of one component (and the pixel ring around it, its soft edge) in an image (3, H, W):
    each pixel's share of the way from the background to the object's color."""
    ys, xs = torch.nonzero(where, as_tuple=True)
    top, bottom = max(0, int(ys.min()) - 1), int(ys.max()) + 2
    left, right = max(0, int(xs.min()) - 1), int(xs.max()) + 2
    near = F.max_pool2d(where[None, None].float(), 3, stride=1, padding=1)[0, 0, top:bottom, left:right] > 0
    direction = color - background
    share = ((image[:, top:bottom, left:right] - background.view(3, 1, 1)) * direction.view(3, 1, 1)).sum(0)
    return torch.where(near, share / direction.pow(2).sum().clamp(min=1e-6), 0.0).clamp(0.0, 1.0)


def _components(
    labels: torch.Tensor, strength: torch.Tensor, video: torch.Tensor, frame: int, background: torch.Tensor
) -> list[dict]:
    """Components of one frame with area >= MIN_AREA: area, centroid (x, y), a robust color, and (area >=
    SHAPE_MIN_AREA) its shape."""
    found = []
    frame_labels = labels[frame]
    for value in torch.unique(frame_labels):
        if value == 0:
            continue
        where = frame_labels == value
        area = int(where.sum())
        if area < MIN_AREA:
            continue
        ys, xs = torch.nonzero(where, as_tuple=True)
        s = strength[frame][where]
        core = s >= 0.5 * s.max()
        pixels = video[frame].permute(1, 2, 0)[where][core]
        color = pixels.median(0).values
        shape = None
        if area >= SHAPE_MIN_AREA:
            shape = shape_of(*measure_shape(_coverage(where, video[frame], color, background)))
        found.append(
            {"area": area, "x": float(xs.float().mean()), "y": float(ys.float().mean()), "color": color, "shape": shape}
        )
    return found


def nearest_color(rgb: torch.Tensor) -> str:
    return _PALETTE_NAMES[int(((_PALETTE - rgb.view(1, 3)) ** 2).sum(1).argmin())]


def read_video(frames: np.ndarray) -> VideoReading:
    """What a uint8 (T, H, W, 3) video shows, in the grammar's terms (None where nothing is found)."""
    video = _downscale(frames)  # (T, 3, h, w)
    t, _, h, w = video.shape
    keys = sorted({0, t // 2, t - 1})
    background = video[keys].permute(1, 0, 2, 3).reshape(3, -1).median(dim=1).values
    strength = (video - background.view(1, 3, 1, 1)).abs().amax(dim=1)  # (T, h, w)
    labels = label_components(strength > FOREGROUND_THRESHOLD)
    per_frame = [_components(labels, strength, video, i, background) for i in range(t)]
    counts = [len(c) for c in per_frame]
    count = int(np.median(counts)) if counts else 0
    votes = Counter(c["shape"] for components in per_frame for c in components if c["shape"] is not None)
    shape = votes.most_common(1)[0][0] if votes else None
    details: dict = {"background": [round(float(v), 3) for v in background], "shape_votes": dict(votes)}
    middle = t // 2
    if not per_frame[middle]:
        candidates = [i for i in range(t) if per_frame[i]]
        if not candidates:
            return VideoReading(None, None, count, shape, counts, details)
        middle = min(candidates, key=lambda i: abs(i - t // 2))
    anchor = max(per_frame[middle], key=lambda c: c["area"])
    track: dict[int, dict] = {middle: anchor}
    for direction in (-1, 1):
        previous = anchor
        i = middle + direction
        while 0 <= i < t:
            if per_frame[i]:
                best = min(per_frame[i], key=lambda c: (c["x"] - previous["x"]) ** 2 + (c["y"] - previous["y"]) ** 2)
                track[i] = previous = best
            i += direction
    color = nearest_color(anchor["color"])
    frames_tracked = sorted(track)
    quarter = max(1, len(frames_tracked) // 4)
    first, last = frames_tracked[:quarter], frames_tracked[-quarter:]

    def median(key: str, idx: list[int]) -> float:
        return float(np.median([track[i][key] for i in idx]))

    dx = median("x", last) - median("x", first)
    dy = median("y", last) - median("y", first)
    growth = median("area", last) / max(1.0, median("area", first))
    moved = max(abs(dx) / w, abs(dy) / h)
    if growth >= GROWTH_RATIO and moved < 0.25:
        motion = "growing"
    elif growth <= 1.0 / GROWTH_RATIO and moved < 0.25:
        motion = "shrinking"
    elif moved < STILL_DISPLACEMENT:
        motion = "still"
    elif abs(dx) >= abs(dy):
        motion = "right" if dx > 0 else "left"
    else:
        motion = "down" if dy > 0 else "up"
    details.update(
        {
            "dx": round(dx / w, 3),
            "dy": round(dy / h, 3),
            "growth": round(growth, 3),
            "color_rgb": [round(float(v), 3) for v in anchor["color"]],
        }
    )
    return VideoReading(color, motion, count, shape, counts, details)
