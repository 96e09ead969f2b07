"""The fused walk of Wan 2.1's VAE decoder (studio.engine.vae_fused): latent frame by latent frame it makes the
decoder's own frames (float32 on the CPU, to float32 rounding), through its causal cache, for batches and
for every latent frame after the first; the engine's decode takes it only where it was installed; decoders it
does not know keep their own forward."""

from __future__ import annotations

import pytest
import torch
from diffusers import AutoencoderKLWan

from studio.config import TINY_WAN_DIR
from studio.engine import vae_fused
from studio.engine.vae_chunks import vae_decode_chunks


def wan_layout_vae(base_dim: int = 16) -> AutoencoderKLWan:
    """Wan 2.1's decoder layout (its mid block's attention, two 3-D and one 2-D upsampling, widths 4:4:4:2:1) at
    a small width, random weights: channels of more than one, so no RMS norm is a sign function."""
    torch.manual_seed(0)
    return AutoencoderKLWan(base_dim=base_dim).eval()


def module_frames(vae: AutoencoderKLWan, z: torch.Tensor) -> list[torch.Tensor]:
    return list(vae_decode_chunks(vae, z, fused=False))


@pytest.mark.parametrize("shape", [(1, 16, 3, 6, 10), (2, 16, 4, 4, 7)])
def test_walk_makes_the_decoders_frames(shape: tuple[int, ...]) -> None:
    vae = wan_layout_vae()
    assert vae_fused.fusable(vae.decoder)
    torch.manual_seed(1)
    z = torch.randn(*shape)
    walk = vae_fused.FusedWanDecoder(vae.decoder, compiled=False)
    with torch.inference_mode():
        expected = module_frames(vae, z)
        x = vae.post_quant_conv(z)
        got = [walk.decode_frame(x[:, :, i : i + 1], first_chunk=i == 0).clamp(-1, 1) for i in range(shape[2])]
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert [g.shape[2] for g in got] == [1] + [4] * (shape[2] - 1)  # the first latent frame is one frame
    for g, e in zip(got, expected, strict=True):
        assert torch.allclose(g, e, atol=1e-4), (g - e).abs().max()
    # what a wrong cache gives: a later latent frame decoded without the earlier ones differs
    with torch.inference_mode():
        alone = walk.decode_frame(x[:, :, 1:2], first_chunk=True).clamp(-1, 1)
    assert (alone - expected[1][:, :, :1]).abs().max() > 1e-3


def test_first_chunk_resets_the_cache_between_videos() -> None:
    vae = wan_layout_vae()
    walk = vae_fused.FusedWanDecoder(vae.decoder, compiled=False)
    torch.manual_seed(2)
    first, second = torch.randn(1, 16, 2, 4, 6), torch.randn(2, 16, 2, 5, 5)  # another batch and size
    with torch.inference_mode():
        for z in (first, second):
            x = vae.post_quant_conv(z)
            got = torch.cat([walk.decode_frame(x[:, :, i : i + 1], first_chunk=i == 0) for i in range(2)], 2)
            expected = torch.cat(module_frames(vae, z), 2)
            assert torch.allclose(got.clamp(-1, 1), expected, atol=1e-4)


def test_engine_decode_takes_the_walk_only_where_installed() -> None:
    vae = wan_layout_vae()
    torch.manual_seed(3)
    z = torch.randn(1, 16, 2, 4, 6)
    calls = []
    try:
        assert vae_fused.install(vae, compiled=False)
        walk = vae_fused.installed(vae.decoder)
        assert walk is not None
        decode_frame = walk.decode_frame
        walk.decode_frame = lambda x, first_chunk: calls.append(first_chunk) or decode_frame(x, first_chunk)
        with torch.inference_mode():
            fused = torch.cat(list(vae_decode_chunks(vae, z)), 2)
            assert calls == [True, False]
            plain = torch.cat(list(vae_decode_chunks(vae, z, fused=False)), 2)  # what the strips decode with
            assert calls == [True, False]
            whole = vae.decode(z, return_dict=False)[0]  # the pipeline's own call keeps diffusers' forward
            assert calls == [True, False]
        assert torch.allclose(fused, plain, atol=1e-4)
        assert torch.equal(plain, whole)
        assert walk._cache == []  # nothing of this video is kept for the next
    finally:
        vae_fused.uninstall(vae)
    assert vae_fused.installed(vae.decoder) is None


def test_unknown_decoders_keep_their_own_forward() -> None:
    vae = wan_layout_vae()
    assert vae_fused.fusable(vae.decoder)
    residual = AutoencoderKLWan(base_dim=8, is_residual=True, z_dim=16, decoder_base_dim=8).eval()  # Wan 2.2's kind
    assert not vae_fused.fusable(residual.decoder)
    assert not vae_fused.install(residual, compiled=False)
    assert vae_fused.installed(residual.decoder) is None
    assert not vae_fused.fusable(torch.nn.Conv3d(1, 1, 1))
    assert vae_fused.installed(object()) is None  # not weakly referenceable: never installed
    tiny = AutoencoderKLWan.from_pretrained(str(TINY_WAN_DIR / "vae")).eval()
    assert vae_fused.fusable(tiny.decoder)


def test_norm_rows_match_diffusers_norm() -> None:
    """The fused norm and SiLU on rows of pixels equal WanRMS_norm then SiLU on the (B, C, T, H, W) tensor."""
    vae = wan_layout_vae()
    norm = vae.decoder.up_blocks[0].resnets[0].norm1
    torch.nn.init.uniform_(norm.gamma, 0.5, 1.5)
    torch.manual_seed(4)
    x = torch.randn(2, norm.gamma.shape[0], 3, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    with torch.inference_mode():
        expected = torch.nn.functional.silu(norm(x))
        rows = vae_fused.norm_silu_rows(vae_fused.as_rows(x), norm.gamma.view(-1), torch.tensor(float(norm.scale)))
        got = vae_fused.from_rows(rows, x)
    assert torch.allclose(got, expected, atol=1e-6)


def test_a_compile_that_fails_falls_back_to_the_eager_norm(caplog: pytest.LogCaptureFixture) -> None:
    """A compiled norm that raises (a compile this torch refuses) leaves the video whole: the walk takes the eager
    function from then on, with the same frames."""
    vae = wan_layout_vae()
    walk = vae_fused.FusedWanDecoder(vae.decoder, compiled=False)
    calls = []

    def refused(*_args: object) -> torch.Tensor:
        calls.append(1)
        raise RuntimeError("the compiler refused this kernel")

    walk._norm = refused
    torch.manual_seed(5)
    z = torch.randn(1, 16, 2, 4, 6)
    with torch.inference_mode(), caplog.at_level("WARNING"):
        x = vae.post_quant_conv(z)
        got = torch.cat([walk.decode_frame(x[:, :, i : i + 1], first_chunk=i == 0) for i in range(2)], 2)
    assert calls == [1] and walk._norm is vae_fused.norm_silu_rows
    assert "eager from now on" in caplog.text
    assert torch.allclose(got.clamp(-1, 1), torch.cat(module_frames(vae, z), 2), atol=1e-4)


def test_the_kernel_is_refused_off_a_gpu_and_the_walk_keeps_torch_ops() -> None:
    """The norm-and-join kernel is Triton's: on a CPU it is refused with the reason, and the walk installed with it
    asked for decodes through torch ops, with the decoder's frames."""
    assert "CUDA" in (vae_fused.kernel_problem("cpu") or "")
    vae = wan_layout_vae()
    torch.manual_seed(6)
    z = torch.randn(1, 16, 2, 4, 6)
    try:
        assert vae_fused.install(vae, compiled=False, kernel=True)
        walk = vae_fused.installed(vae.decoder)
        assert walk is not None and not walk.kernel
        with torch.inference_mode():
            got = torch.cat(list(vae_decode_chunks(vae, z)), 2)
            expected = torch.cat(module_frames(vae, z), 2)
    finally:
        vae_fused.uninstall(vae)
    assert torch.allclose(got, expected, atol=1e-4)
