"""Cosmos 3 resolution tiers, aspect ratios, fps choices and frame rules.

The server uses width/height exactly as sent, so mapping a tier and an aspect to a size is the client's
job. Frame counts are rounded up to 4k+1 because the video VAE compresses time by 4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from studio.protocol import DEFAULT_FPS

Tier = Literal["256p", "480p", "720p"]
Aspect = Literal["1:1", "4:3", "3:4", "16:9", "9:16"]

TIERS: tuple[Tier, ...] = ("256p", "480p", "720p")
ASPECTS: tuple[Aspect, ...] = ("16:9", "9:16", "1:1", "4:3", "3:4")
# What a request asks where it names no tier or aspect (the page's form, the CLI, the API, the bench, a RunSpec).
DEFAULT_TIER: Tier = "256p"
DEFAULT_ASPECT: Aspect = "16:9"

SIZES: dict[str, dict[str, tuple[int, int]]] = {
    "256p": {"1:1": (256, 256), "4:3": (320, 256), "3:4": (256, 320), "16:9": (320, 192), "9:16": (192, 320)},
    "480p": {"1:1": (640, 640), "4:3": (736, 544), "3:4": (544, 736), "16:9": (832, 480), "9:16": (480, 832)},
    "720p": {
        "1:1": (960, 960),
        "4:3": (1104, 832),
        "3:4": (832, 1104),
        "16:9": (1280, 720),
        "9:16": (720, 1280),
    },
}

FPS_CHOICES: tuple[int, ...] = (10, 16, 24, 30)  # DEFAULT_FPS (24) is the wire contract's (studio.protocol)
MIN_FRAMES = 5
# Frame ceilings of cosmos-framework per tier.
TIER_MAX_FRAMES: dict[str, int] = {"256p": 400, "480p": 300, "720p": 200}
# NVIDIA's default is 189 frames (about 7.9 s at 24 fps) for every tier.
DEFAULT_FRAMES: dict[str, int] = {"256p": 189, "480p": 189, "720p": 189}
DEFAULT_STEPS = 35
DEFAULT_GUIDANCE = 6.0
DEFAULT_FLOW_SHIFT = 10.0
TEMPORAL_COMPRESSION = 4


class TierError(ValueError):
    """A tier, aspect, frame count or fps outside the Cosmos 3 table."""


@dataclass(frozen=True)
class Shape:
    """The size and length of one video as it goes to the server."""

    tier: str
    aspect: str
    width: int
    height: int
    num_frames: int
    fps: int

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def seconds(self) -> float:
        return self.num_frames / self.fps


def size_for(tier: str, aspect: str) -> tuple[int, int]:
    """(width, height) of a tier at an aspect ratio."""
    if tier not in SIZES:
        raise TierError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    if aspect not in SIZES[tier]:
        raise TierError(f"unknown aspect {aspect!r}; choose one of {', '.join(ASPECTS)}")
    return SIZES[tier][aspect]


# A prompt line's own aspect, written before it: `9:16 | a dancer on a rooftop` (the run's aspect elsewhere).
LINE_ASPECT = re.compile(r"^\s*(\d{1,2}:\d{1,2})\s*\|")


def line_aspect(prompt: str) -> tuple[str | None, str]:
    """A prompt line's own aspect (None where it names none) and the prompt without it. Raises TierError for an
    aspect that is not one of ASPECTS, or a prefix with no prompt after it."""
    match = LINE_ASPECT.match(prompt)
    if match is None:
        return None, prompt
    aspect, text = match.group(1), prompt[match.end() :].strip()
    if aspect not in ASPECTS:
        raise TierError(f"unknown aspect {aspect!r} before a prompt; choose one of {', '.join(ASPECTS)}")
    if not text:
        raise TierError(f"write a prompt after {aspect!r} |")
    return aspect, text


def round_frames(num_frames: int) -> int:
    """Round up to the next 4k+1, as the pipeline does (the studio before sending, the embedded engine on receipt)."""
    if num_frames < 1:
        raise TierError(f"frames must be at least 1, got {num_frames}")
    remainder = (num_frames - 1) % TEMPORAL_COMPRESSION
    return num_frames if remainder == 0 else num_frames + TEMPORAL_COMPRESSION - remainder


def normalize_frames(num_frames: int, tier: str) -> int:
    """Check a requested frame count against the tier's limits and return the 4k+1 count the server makes.

    Rounding up past the ceiling would exceed the tier's limit, so in that one case it rounds down.
    """
    ceiling = TIER_MAX_FRAMES.get(tier)
    if ceiling is None:
        raise TierError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    if not MIN_FRAMES <= num_frames <= ceiling:
        raise TierError(f"frames must be between {MIN_FRAMES} and {ceiling} for {tier}, got {num_frames}")
    rounded = round_frames(num_frames)
    return rounded if rounded <= ceiling else rounded - TEMPORAL_COMPRESSION


def check_fps(fps: int) -> int:
    if fps not in FPS_CHOICES:
        raise TierError(f"fps must be one of {', '.join(map(str, FPS_CHOICES))}, got {fps}")
    return fps


def shape_for(tier: str, aspect: str, num_frames: int | None = None, fps: int = DEFAULT_FPS) -> Shape:
    """The full shape of a video for a tier, aspect, frame count (tier default if None) and fps."""
    width, height = size_for(tier, aspect)
    frames = normalize_frames(DEFAULT_FRAMES[tier] if num_frames is None else num_frames, tier)
    return Shape(tier=tier, aspect=aspect, width=width, height=height, num_frames=frames, fps=check_fps(fps))


def tier_and_aspect_of_size(width: int, height: int) -> tuple[str, str] | None:
    """The tier and aspect a size is, or None for a size outside the table."""
    for tier, by_aspect in SIZES.items():
        for aspect, size in by_aspect.items():
            if size == (width, height):
                return tier, aspect
    return None


def tier_of_size(width: int, height: int) -> str | None:
    """The tier a size belongs to, or None for a size outside the table."""
    found = tier_and_aspect_of_size(width, height)
    return found[0] if found else None
