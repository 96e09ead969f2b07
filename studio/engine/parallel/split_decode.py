"""The VAE decode of a batch spread over the engine's ranks: each rank decodes one strip of every frame, and the
strips are gathered into whole frames.

Wan's VAE decoder is local in space after its middle block: its up blocks and head are convolutions (3x3 at
most), per-pixel RMS norms and nearest upsampling; the middle block's attention is the last operation that sees
the whole frame. So every rank runs the decoder's input convolution and middle block on the whole latent frame
(a small share of the work, at the latent's size), keeps its strip plus a halo of latent columns (or rows) as
wide as what the rest of the decoder can see, decodes that, and drops the halo. The strips then equal the whole
decode's pixels where they stand: the same frames, with each rank doing a part of the upsampling work, which is
nearly all of it.

The strips run along the frame's longer latent side. Time is not split: the decoder's causal cache stays per
rank, each rank always holding the same strip.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

import torch

from studio.engine.frames import to_uint8_tensor
from studio.engine.vae_chunks import vae_decode_chunks

if TYPE_CHECKING:
    from studio.engine.parallel.rank import ParallelRank


@dataclass(frozen=True)
class Strip:
    """One rank's part of a latent side: it owns [start, stop) and decodes [lo, hi) (the halo around it)."""

    start: int
    stop: int
    lo: int
    hi: int


# Each decoder's halo, worked out once (a walk over its modules) rather than at every decode.
_HALOS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def decoder_halo(decoder: Any) -> int:
    """Latent columns a strip needs on each side so that its own pixels equal the whole decode's: the reach of
    every spatial convolution after the middle block, each counted at the scale it runs at (upsampling halves
    the reach of what follows in latent units), rounded up, plus one for nearest upsampling at a strip's edge."""
    if decoder not in _HALOS:
        _HALOS[decoder] = _reach(decoder)
    return _HALOS[decoder]


def _reach(decoder: Any) -> int:
    scale, reach = 1.0, 0.0
    for module in chain(decoder.up_blocks.modules(), [decoder.conv_out]):
        if isinstance(module, torch.nn.Upsample):
            factor = module.scale_factor
            scale *= float(factor[-1] if isinstance(factor, tuple) else factor)
        elif isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d)):
            reach += (module.kernel_size[-1] // 2) * module.dilation[-1] / scale
    return math.ceil(reach) + 1


def plan_strips(length: int, parts: int, halo: int) -> list[Strip]:
    """`length` latent columns in `parts` near-equal strips (the first ones one wider where it does not divide),
    each with up to `halo` columns of context on either side."""
    if parts < 1 or length < parts:
        raise ValueError(f"cannot split {length} latent columns into {parts} strips")
    base, extra = divmod(length, parts)
    strips, start = [], 0
    for part in range(parts):
        stop = start + base + (1 if part < extra else 0)
        strips.append(Strip(start, stop, max(0, start - halo), min(length, stop + halo)))
        start = stop
    return strips


# A split pays where each rank's strip, halo included, is at most this share of the frame's side: at 480p and
# 720p two strips take about their share of the whole decode's time; at 256p a strip is most of the frame and
# takes as long as the whole, the decode being bound by its kernel launches there
# (benchmarks/experiments/split_decode.py; benchmarks/RESULTS.md, the VAE decode in strips).
SPLIT_WORTH = 0.75


def can_split(vae: Any, z: torch.Tensor, parts: int) -> bool:
    """Whether this decode is split in strips: Wan's VAE decoding frame by frame (not tiled), at a size where
    each strip with its halo is a clear share of the frame (SPLIT_WORTH). The same answer on every rank (it
    depends on shapes only)."""
    decoder = getattr(vae, "decoder", None)
    if type(vae).__name__ != "AutoencoderKLWan" or decoder is None or not hasattr(decoder, "mid_block"):
        return False
    length = max(z.shape[-1], z.shape[-2])
    if getattr(vae, "use_tiling", False) or parts < 2 or length < parts:
        return False
    widest = max(strip.hi - strip.lo for strip in plan_strips(length, parts, decoder_halo(decoder)))
    return widest <= SPLIT_WORTH * length


@contextmanager
def cropped_after_middle(decoder: Any, dim: int, strip: Strip) -> Iterator[None]:
    """Within: the decoder's middle block hands on only this strip (with its halo) of the latent frame, so the
    up blocks and head decode that strip alone."""

    def crop(_module: Any, _args: Any, output: torch.Tensor) -> torch.Tensor:
        return output.narrow(dim, strip.lo, strip.hi - strip.lo)

    handle = decoder.mid_block.register_forward_hook(crop)
    try:
        yield
    finally:
        handle.remove()


def split_frames(vae: Any, z: torch.Tensor, rank: ParallelRank) -> Iterator[torch.Tensor]:
    """`vae.decode(z)` (B, C, T, H, W), latent frame by latent frame as uint8 (B, T, H, W, 3), each rank decoding
    its strip; every rank yields the whole frames (the leader hands them on, the others drop them)."""
    parts, index = rank.layout.world_size, rank.layout.rank
    dim = -1 if z.shape[-1] >= z.shape[-2] else -2  # the longer side: the halo is the smaller share of it
    axis = 3 if dim == -1 else 2  # that side in the uint8 frames (B, T, H, W, 3)
    strips = plan_strips(z.shape[dim], parts, decoder_halo(vae.decoder))
    mine = strips[index]
    with cropped_after_middle(vae.decoder, dim, mine):
        # the decoder's own forward: the crop is a hook on its middle block, which the fused walk does not call
        for video in vae_decode_chunks(vae, z, fused=False):
            scale = video.shape[dim] // (mine.hi - mine.lo)  # pixels per latent column
            own = video.narrow(dim, (mine.start - mine.lo) * scale, (mine.stop - mine.start) * scale)
            widths = [(strip.stop - strip.start) * scale for strip in strips]
            yield rank.gather_strips(to_uint8_tensor(own), axis, widths)
