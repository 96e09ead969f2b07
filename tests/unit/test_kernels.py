"""The engine's kernel substitutions in a Wan transformer (studio.engine.gpu.kernels). Off a GPU each op runs its
plain torch arithmetic, so here they must give diffusers' own results; the Triton and cuBLASLt paths are
checked against the same arithmetic on the GPU (benchmarks/gpu/profile_gpu.py) and by the engine before it serves."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from diffusers import WanTransformer3DModel

from studio.engine.generator import VideoGenerator
from studio.engine.gpu import kernels

TINY_WAN_DIR = Path(__file__).resolve().parents[2] / "assets" / "tiny-wan"

TINY_CONFIG = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 2,
    "attention_head_dim": 12,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 16,
    "freq_dim": 32,
    "ffn_dim": 40,
    "num_layers": 2,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 64,
}


def tiny_transformer() -> WanTransformer3DModel:
    torch.manual_seed(0)
    model = WanTransformer3DModel(**TINY_CONFIG).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.2)  # far from the initial values, so every weight matters
    model.fuse_qkv_projections()
    return model


def forward(model: WanTransformer3DModel) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 3, 8, 8, generator=generator)
    context = torch.randn(2, 7, 16, generator=generator)
    with torch.inference_mode():
        return model(x, torch.tensor([300.0, 700.0]), context, return_dict=False)[0]


def test_the_kernels_keep_the_transformers_arithmetic_and_come_out_again() -> None:
    model = tiny_transformer()
    plain = forward(model)
    processors = [m.processor for m in model.modules() if type(m).__name__ == "WanAttention"]
    installed = kernels.install(model, "default")
    assert installed.counts == {"attention": 4, "ffn_gelu": 2}  # self- and cross-attention, one FFN per block
    assert all(isinstance(m.processor, kernels.EngineWanAttnProcessor) for m in model.modules() if hasattr(m, "to_kv"))
    torch.testing.assert_close(forward(model), plain, rtol=1e-5, atol=1e-5)
    installed.undo()
    assert [m.processor for m in model.modules() if type(m).__name__ == "WanAttention"] == processors
    assert torch.equal(forward(model), plain)


def test_attention_without_fused_projections_is_left_alone() -> None:
    torch.manual_seed(0)
    model = WanTransformer3DModel(**TINY_CONFIG).eval()  # q/k/v not fused: the processor would not apply
    installed = kernels.install(model, "default")
    assert installed.counts == {"attention": 0, "ffn_gelu": 2}


def test_linear_gelu_is_the_tanh_form() -> None:
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = torch.randn(3, 5, 16, generator=generator), torch.randn(32, 16), torch.randn(32)
    linear = torch.nn.functional.linear(x, weight, bias)
    out = kernels.linear_gelu_tanh(x, weight, bias)
    torch.testing.assert_close(out, torch.nn.functional.gelu(linear, approximate="tanh"))
    assert not torch.allclose(out, torch.nn.functional.gelu(linear), atol=1e-5)  # not the erf form


def test_attention_bnhd_is_sdpa_in_token_major_order() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 3, 8, generator=generator) for n in (10, 6, 6))
    out = kernels.attention_bnhd(q, k, v, "math")
    expected = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    assert out.is_contiguous() and out.shape == (2, 10, 3, 8)
    torch.testing.assert_close(out, expected.transpose(1, 2))


def test_the_ops_fake_shapes_and_strides_match_their_results() -> None:
    # The compiler lays out what follows each op from its fake result: a stride that differs from the real
    # result would make the compiled kernels read the wrong elements.
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 6, 3 * 24, generator=generator)
    q, k, v = qkv.chunk(3, dim=-1)
    cos, sin = torch.randn(6, 12, generator=generator), torch.randn(6, 12, generator=generator)
    torch.library.opcheck(kernels.qk_norm_rope, (q, k, torch.rand(24) + 0.5, torch.rand(24) + 0.5, cos, sin, 1e-6, 2))
    torch.library.opcheck(
        kernels.attention_bnhd, (q.unflatten(2, (2, -1)), k.unflatten(2, (2, -1)), v.unflatten(2, (2, -1)), "math")
    )
    torch.library.opcheck(kernels.linear_gelu_tanh, (q, torch.randn(40, 24), torch.randn(40)))


@pytest.fixture(scope="module")
def generator() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    generator.pipe.transformer.fuse_qkv_projections()  # as the engine does on a GPU before it installs them
    return generator


def test_the_engine_installs_kernels_that_match_the_plain_forward(generator: VideoGenerator) -> None:
    generator.gpu.install_kernels(generator.pipe)
    try:
        assert generator.gpu.kernels["attention"] > 0 and generator.gpu.kernels["ffn_gelu"] > 0
        assert generator.gpu.installed_kernels is not None
    finally:
        generator.gpu.remove_kernels()
    assert generator.gpu.kernels == {} and generator.gpu.installed_kernels is None


def test_the_engine_refuses_kernels_that_change_the_forward(
    generator: VideoGenerator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reference = kernels.qk_norm_rope_reference

    def rotated_wrong(q, k, *args):  # type: ignore[no-untyped-def]
        rq, rk = reference(q, k, *args)
        return rq.flip(1), rk  # tokens out of order: the attention then mixes the wrong positions

    monkeypatch.setattr(kernels, "qk_norm_rope_reference", rotated_wrong)
    transformer = generator.pipe.transformer
    processors = [m.processor for m in transformer.modules() if type(m).__name__ == "WanAttention"]
    with caplog.at_level(logging.WARNING, logger="studio.engine.gpu.kernels"):
        generator.gpu.install_kernels(generator.pipe)
    assert generator.gpu.kernels == {} and generator.gpu.installed_kernels is None
    assert [m.processor for m in transformer.modules() if type(m).__name__ == "WanAttention"] == processors
    assert "not used" in caplog.text and "differs" in caplog.text


def test_the_engine_flags_turn_the_kernels_and_their_tuning_off() -> None:
    from studio.config import EngineSettings
    from studio.engine.__main__ import build_parser

    def settings(*argv: str) -> EngineSettings:
        args = build_parser().parse_args(list(argv))
        return EngineSettings(**{k: v for k, v in vars(args).items() if v is not None})

    assert settings().fused_kernels and settings().tune_kernels
    off = settings("--no-fused-kernels", "--no-tune-kernels")
    assert not off.fused_kernels and not off.tune_kernels


def test_sage_attention_is_refused_off_a_gpu_and_named_only_where_in_force() -> None:
    from studio.engine.gpu.gpu_setup import GpuSetup
    from studio.engine.gpu.sage import sage_problem

    assert sage_problem("cpu") == "SageAttention needs a CUDA GPU (this engine runs on cpu)"
    setup = GpuSetup("cpu", attention_backend="sage")
    # asked for, but not in force: no kernel runs it, so no record may name it
    assert setup.own_attention == "sage" and setup.attention_backend_setting == "auto"
    assert setup.attention_kernel == "default" and setup.levers == {}


def test_sage_attention_runs_through_the_engines_attention_op(
    generator: VideoGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SageAttention's kernels run on CUDA GPUs only: this stands in a `sageattention` module whose `sageattn`
    keeps the package's documented contract (q, k, v as (B, N, H, D) with tensor_layout="NHD", the result in the
    same layout and dtype) with exact attention, to check that the engine routes self-attention through it, names
    the lever in its records only while it is in force, and takes it out again."""
    import sys
    import types

    calls: list[tuple[torch.Size, str]] = []

    def sageattn(q, k, v, tensor_layout="HND", is_causal=False, **_):  # type: ignore[no-untyped-def]
        assert tensor_layout == "NHD" and not is_causal and q.stride(-1) == 1
        calls.append((q.shape, tensor_layout))
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)

    monkeypatch.setitem(sys.modules, "sageattention", types.SimpleNamespace(sageattn=sageattn))
    generator.gpu.own_attention = "sage"
    generator.gpu.install_kernels(generator.pipe)
    try:
        assert generator.gpu.installed_kernels is not None and calls, "the start-up check ran no attention through it"
        assert generator.gpu.attention_kernel == "sage" and generator.gpu.levers == {"attention": "sage"}
        processors = [m.processor for m in generator.pipe.transformer.modules() if type(m).__name__ == "WanAttention"]
        assert {p.backend for p in processors if isinstance(p, kernels.EngineWanAttnProcessor)} == {"sage"}
    finally:
        generator.gpu.remove_kernels()
        generator.gpu.own_attention = None
    assert generator.gpu.attention_kernel == "default" and generator.gpu.levers == {}


def test_flash_attention_3_runs_through_the_engines_attention_op_and_is_no_lever(
    generator: VideoGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlashAttention 3 runs on Hopper GPUs only: this stands in a `flash_attn_interface` module whose
    `flash_attn_func` keeps the interface's documented contract (q, k, v as (B, N, H, D), the result in the same
    layout) with exact attention, to check that the engine routes self-attention through it and, exact attention
    being no lever, names none in its records."""
    import sys
    import types

    calls: list[torch.Size] = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, **_):  # type: ignore[no-untyped-def]
        assert not causal and softmax_scale is None and q.stride(-1) == 1
        calls.append(q.shape)
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)

    monkeypatch.setitem(sys.modules, "flash_attn_interface", types.SimpleNamespace(flash_attn_func=flash_attn_func))
    generator.gpu.own_attention = "flash3"
    generator.gpu.install_kernels(generator.pipe)
    try:
        assert generator.gpu.installed_kernels is not None and calls, "the start-up check ran no attention through it"
        assert generator.gpu.attention_kernel == "flash3" and generator.gpu.levers == {}
        processors = [m.processor for m in generator.pipe.transformer.modules() if type(m).__name__ == "WanAttention"]
        assert {p.backend for p in processors if isinstance(p, kernels.EngineWanAttnProcessor)} == {"flash3"}
    finally:
        generator.gpu.remove_kernels()
        generator.gpu.own_attention = None
    assert generator.gpu.attention_kernel == "default"


def test_flash_attention_3_in_fp8_runs_through_the_engines_attention_op_as_a_lever(
    generator: VideoGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlashAttention 3's fp8 forward runs on Hopper GPUs only: this stands in a `flash_attn_interface` module whose
    `flash_attn_func` keeps the interface's documented fp8 contract (q, k, v in float8_e4m3fn as (B, N, H, D), their
    (B, H) float32 descales, the result in bf16) by exact attention over the descaled inputs, to check that the engine
    hands it fp8 inputs whose attention is the model's, and names the lever in its records only while it is in force."""
    import sys
    import types

    calls: list[torch.dtype] = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None):  # type: ignore[no-untyped-def]
        assert not causal and softmax_scale is None
        assert q.dtype == k.dtype == v.dtype == torch.float8_e4m3fn
        batch, _, heads, _ = q.shape
        for descale in (q_descale, k_descale, v_descale):
            assert descale.shape == (batch, heads) and descale.dtype == torch.float32
        calls.append(q.dtype)
        q, k, v = (x.float() * s[:, None, :, None] for x, s in ((q, q_descale), (k, k_descale), (v, v_descale)))
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2).to(torch.bfloat16)

    monkeypatch.setitem(sys.modules, "flash_attn_interface", types.SimpleNamespace(flash_attn_func=flash_attn_func))
    generator.gpu.own_attention = "flash3-fp8"
    generator.gpu.install_kernels(generator.pipe)
    try:
        assert generator.gpu.installed_kernels is not None and calls, "the start-up check ran no attention through it"
        assert generator.gpu.attention_kernel == "flash3-fp8"
        assert generator.gpu.levers == {"attention": "flash3-fp8"}
    finally:
        generator.gpu.remove_kernels()
        generator.gpu.own_attention = None
    assert generator.gpu.attention_kernel == "default" and generator.gpu.levers == {}
