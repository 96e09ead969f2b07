"""The VAE decode in strips (studio.engine.parallel.split_decode), one strip after another in this process: the
strips, each decoded with its halo, join into the frames the whole decode makes, for the tiny Wan VAE and the
Wan 2.1 VAE's architecture (random weights); without the halo they do not."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from diffusers import AutoencoderKLWan

from studio.config import TINY_WAN_DIR
from studio.engine.frames import to_uint8_tensor
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.split_decode import can_split, decoder_halo, plan_strips, split_frames
from studio.engine.vae_chunks import vae_decode_chunks


class StripsInTurn:
    """A rank of `parts` whose exchange hands back its own strip: the test joins the strips itself. (The
    exchange across processes is tested with real ranks in tests/integration/test_engine_parallel_cpu.py.)"""

    def __init__(self, index: int, parts: int):
        self.layout = RankLayout(1, parts, index)
        self.widths: list[int] = []

    def gather_strips(self, strip: torch.Tensor, axis: int, widths: list[int]) -> torch.Tensor:
        self.widths = widths
        return strip


def whole_decode(vae: AutoencoderKLWan, z: torch.Tensor) -> torch.Tensor:
    return torch.cat([to_uint8_tensor(video) for video in vae_decode_chunks(vae, z)], dim=1)


def decode_in_strips(vae: AutoencoderKLWan, z: torch.Tensor, parts: int, axis: int) -> torch.Tensor:
    strips = []
    for index in range(parts):
        rank = StripsInTurn(index, parts)
        strips.append(torch.cat(list(split_frames(vae, z, rank)), dim=1))
        assert strips[-1].shape[axis] == rank.widths[index]
    return torch.cat(strips, dim=axis)


def tiny_vae() -> AutoencoderKLWan:
    return AutoencoderKLWan.from_pretrained(str(TINY_WAN_DIR / "vae")).eval()


def wan21_vae() -> AutoencoderKLWan:
    torch.manual_seed(0)
    return AutoencoderKLWan().eval()  # diffusers' defaults are Wan 2.1's VAE


@pytest.mark.parametrize(
    ("make_vae", "shape", "parts", "axis"),
    [
        (tiny_vae, (1, 16, 2, 3, 31), 2, 3),  # latent 3x31: strips along the width, 16 and 15 wide
        (tiny_vae, (2, 16, 2, 33, 4), 3, 2),  # portrait: strips along the height; a batch of two
        (wan21_vae, (1, 16, 1, 2, 36), 2, 3),  # one latent frame: the costly one kept short
    ],
    ids=["tiny-landscape", "tiny-portrait-3", "wan2.1-landscape"],
)
def test_strips_join_into_the_whole_decode(make_vae, shape: tuple[int, ...], parts: int, axis: int) -> None:
    vae = make_vae()
    z = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = whole_decode(vae, z)
        got = decode_in_strips(vae, z, parts, axis)
    assert got.shape == expected.shape
    difference = (got.int() - expected.int()).abs()
    assert difference.max() <= 1 and difference.float().mean() < 0.01


def test_without_the_halo_the_strips_differ_at_their_edges() -> None:
    vae = tiny_vae()
    z = torch.randn((1, 16, 2, 3, 31), generator=torch.Generator().manual_seed(1))
    halo = decoder_halo(vae.decoder)
    with torch.inference_mode():
        expected = whole_decode(vae, z)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("studio.engine.parallel.split_decode.decoder_halo", lambda _decoder: 0)
            got = decode_in_strips(vae, z, 2, 3)
    assert halo >= 2
    assert (got.int() - expected.int()).abs().max() > 1


def test_the_halo_counts_each_convolution_at_its_scale() -> None:
    """Wan 2.1's decoder after its middle block: 6 3x3 convolutions at the latent's scale, then an upsampling
    convolution and 6 more at each of 2x and 4x, and at 8x 6 more and the head: 6 + 7/2 + 7/4 + 7/8 = 12.1."""
    assert decoder_halo(wan21_vae().decoder) == 13 + 1


def test_strips_cover_the_side_once() -> None:
    strips = plan_strips(31, 3, 4)
    assert [(s.start, s.stop) for s in strips] == [(0, 11), (11, 21), (21, 31)]
    assert [(s.lo, s.hi) for s in strips] == [(0, 15), (7, 25), (17, 31)]
    with pytest.raises(ValueError, match="cannot split 2 latent columns into 3"):
        plan_strips(2, 3, 1)


def test_only_a_wan_vae_decoding_frame_by_frame_where_it_pays_is_split() -> None:
    vae = tiny_vae()  # a halo of 10 latent columns
    z = torch.zeros(1, 16, 2, 3, 64)
    assert can_split(vae, z, 2)  # strips of 42 of 64 columns
    assert not can_split(vae, torch.zeros(1, 16, 2, 3, 31), 2)  # 26 of 31: about the whole decode's work
    assert not can_split(vae, torch.zeros(1, 16, 2, 1, 1), 2)  # fewer columns than ranks
    vae.use_tiling = True
    assert not can_split(vae, z, 2)
    assert not can_split(dataclasses.make_dataclass("OtherVae", [])(), z, 2)
