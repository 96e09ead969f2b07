"""fp8 matmuls in a Wan transformer's blocks (studio.engine.gpu.fp8). This torch runs the row-wise scaled product on
the CPU too, so the layers' arithmetic, their install and undo, and their place beside the engine's own kernels
are checked here; the speed and the GPU's product are measured by benchmarks/experiments/step_cache_gpu.py."""

from __future__ import annotations

import pytest
import torch
from diffusers import WanTransformer3DModel

from studio.engine.gpu import fp8, kernels
from studio.engine.gpu.gpu_setup import GpuSetup

# Every width a multiple of 16, as the scaled product asks.
CONFIG = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 32,
    "freq_dim": 32,
    "ffn_dim": 64,
    "num_layers": 2,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 64,
}
LAYERS_PER_BLOCK = 7  # self-attention q/k/v and out, cross-attention q, k/v and out, the feed-forward's two


def transformer() -> WanTransformer3DModel:
    torch.manual_seed(0)
    model = WanTransformer3DModel(**CONFIG).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.2)
    model.fuse_qkv_projections()
    return model.to(torch.bfloat16)


def forward(model: WanTransformer3DModel) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 3, 8, 8, generator=generator).to(torch.bfloat16)
    context = torch.randn(2, 7, 32, generator=generator).to(torch.bfloat16)
    with torch.inference_mode():
        return model(x, torch.tensor([300.0, 700.0]), context, return_dict=False)[0].float()


def test_a_layers_product_is_the_scaled_product_of_its_quantized_operands() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    layer = fp8.Fp8Linear(linear)
    x = torch.randn(3, 10, 64).to(torch.bfloat16)
    out = layer(x)
    assert out.shape == (3, 10, 48) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, fp8.reference_fp8_linear(layer, x), atol=0.02, rtol=0.02)
    # e4m3 keeps 3 mantissa bits: a few percent from bf16, not more, and not nothing
    difference = fp8.relative_rms(out.float(), linear(x).float())
    assert 0.001 < difference < 0.08


def test_rows_are_scaled_to_e4m3s_range_each_on_its_own() -> None:
    rows = torch.tensor([[1.0, -2.0, 0.5, 0.0], [1000.0, 10.0, -3000.0, 1.0]])
    quantized, scale = fp8.quantize_rows(rows)
    assert quantized.dtype == torch.float8_e4m3fn and scale.shape == (2, 1)
    assert quantized.float().abs().amax(dim=1).tolist() == [fp8.FP8_MAX, fp8.FP8_MAX]
    torch.testing.assert_close(quantized.float() * scale, rows, rtol=0.07, atol=0.0)


def test_the_gelu_projection_applies_the_tanh_gelu_after_the_product() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 64).to(torch.bfloat16)
    x = torch.randn(5, 32).to(torch.bfloat16)
    with_gelu, without = fp8.Fp8Linear(linear, "gelu_tanh"), fp8.Fp8Linear(linear)
    torch.testing.assert_close(with_gelu(x), torch.nn.functional.gelu(without(x), approximate="tanh"))


def test_the_bias_is_the_same_added_in_the_product_or_after() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(32, 32).to(torch.bfloat16)
    x = torch.randn(4, 32).to(torch.bfloat16)
    inside, after = fp8.Fp8Linear(linear, bias_inside=True), fp8.Fp8Linear(linear, bias_inside=False)
    torch.testing.assert_close(inside(x), after(x), atol=0.02, rtol=0.02)


def test_widths_the_scaled_product_cannot_take_are_refused() -> None:
    with pytest.raises(ValueError, match="divisible by 16"):
        fp8.Fp8Linear(torch.nn.Linear(40, 32))


def test_install_makes_every_block_layer_fp8_stays_close_and_undo_gives_the_bf16_model_back() -> None:
    model = transformer()
    plain = forward(model)
    originals = [(block.attn1.to_qkv, block.ffn.net[2]) for block in model.blocks]
    installed = fp8.install(model)
    assert installed.layers == LAYERS_PER_BLOCK * CONFIG["num_layers"]
    assert all(isinstance(block.attn1.to_qkv, fp8.Fp8Linear) for block in model.blocks)
    assert all(isinstance(block.attn2.to_out[0], fp8.Fp8Linear) for block in model.blocks)
    assert isinstance(model.proj_out, torch.nn.Linear)  # the output projection stays bf16
    quantized = forward(model)
    difference = fp8.relative_rms(quantized, plain)
    assert 0.0 < difference < fp8.MAX_RELATIVE_RMS
    installed.undo()
    assert [(block.attn1.to_qkv, block.ffn.net[2]) for block in model.blocks] == originals
    torch.testing.assert_close(forward(model), plain, rtol=0, atol=0)


def test_fp8_takes_over_the_engines_gelu_projection_and_both_come_out_in_turn() -> None:
    model = transformer()
    with_kernels = kernels.install(model, "default")
    bf16 = forward(model)
    assert isinstance(model.blocks[0].ffn.net[0], kernels.EpilogueGELU)
    installed = fp8.install(model)
    first = model.blocks[0].ffn.net[0]
    assert isinstance(first, fp8.Fp8Linear) and first.activation == "gelu_tanh"
    assert fp8.relative_rms(forward(model), bf16) < fp8.MAX_RELATIVE_RMS
    installed.undo()
    assert isinstance(model.blocks[0].ffn.net[0], kernels.EpilogueGELU)
    with_kernels.undo()
    assert type(model.blocks[0].ffn.net[0]).__name__ == "GELU"


def test_a_transformer_without_wan_blocks_is_refused() -> None:
    with pytest.raises(fp8.Fp8Unavailable, match="Wan transformers"):
        fp8.install(torch.nn.Sequential(torch.nn.Linear(16, 16)))


def test_off_a_gpu_the_check_refuses_in_a_users_words() -> None:
    assert "CUDA GPU of compute capability 8.9" in fp8.fp8_available("cpu")
    model = transformer()
    with pytest.raises(fp8.Fp8Unavailable, match="this engine runs on cpu"):
        fp8.install_checked(model, "cpu")
    assert isinstance(model.blocks[0].attn1.to_qkv, torch.nn.Linear)  # left as it was


def test_the_setup_names_the_lever_only_once_it_is_in_force() -> None:
    setup = GpuSetup("cpu", quantization="fp8")
    assert setup.quantization == "fp8" and setup.levers == {}
    model = transformer()
    setup.fp8 = fp8.install(model)
    assert setup.levers == {"quantization": "fp8"}
    with pytest.raises(ValueError, match="quantization must be one of none, fp8"):
        GpuSetup("cpu", quantization="int4")


def test_fp8_can_take_the_feed_forward_alone() -> None:
    model = transformer()
    installed = fp8.install(model, ("ffn",))
    assert installed.layers == 2 * CONFIG["num_layers"]
    assert isinstance(model.blocks[0].ffn.net[2], fp8.Fp8Linear)
    assert isinstance(model.blocks[0].attn1.to_qkv, torch.nn.Linear)
    with pytest.raises(ValueError, match="layer kinds"):
        fp8.install(transformer(), ("mlp",))


def test_how_fp8_runs_is_given_when_the_engine_is_made_and_kept_by_the_fall_back_to_eager() -> None:
    from studio.engine.generator import VideoGenerator

    # the defaults are what --quantization fp8 serves
    assert GpuSetup("cpu").fp8_options == fp8.Fp8Options(fp8.LAYER_KINDS, gelu_kernel=True, fast_accum=True)
    ffn_only = fp8.Fp8Options(("ffn",), gelu_kernel=False, fast_accum=False)
    generator = VideoGenerator("unused", device="cpu", quantization="fp8", fp8_options=ffn_only)
    assert generator.gpu.fp8_options == ffn_only
    assert generator._options["fp8_options"] == ffn_only  # each follower rank is made with the same
    setup = GpuSetup("cpu", compile="off", fp8_options=ffn_only)
    model = transformer()
    setup.installed_kernels = kernels.install(model, "default")
    setup.fp8 = fp8.install(model, ("ffn",))
    setup.fall_back_to_eager(type("Pipe", (), {"transformer": model})())
    assert setup.fp8.layers == 2 * CONFIG["num_layers"] and not setup.fp8.fast_accum
    assert isinstance(model.blocks[0].attn1.to_qkv, torch.nn.Linear)


def test_a_jobs_record_names_the_servers_fp8_beside_its_own_step_cache(tmp_path) -> None:
    from studio.engine.generation_types import GenerationParams
    from studio.engine.jobs import Job
    from studio.engine.step_cache import StepCacheMode, StepCachePolicy

    def job(policy: StepCachePolicy, server_levers: dict[str, str]) -> Job:
        params = GenerationParams("a red circle", 32, 32, 5, 4, 5.0, 7, step_cache=policy)
        return Job(id="video_gen_1", params=params, fps=16, model="m", created_at=0, server_levers=server_levers)

    taylor = StepCachePolicy(StepCacheMode.TAYLOR, interval=3)
    assert job(taylor, {"quantization": "fp8"}).record().levers == {
        "quantization": "fp8",
        "step_cache": taylor.label(),
    }
    assert job(StepCachePolicy(), {"quantization": "fp8"}).record().levers == {"quantization": "fp8"}
    assert job(StepCachePolicy(), {}).record().levers is None


def test_the_gelu_taken_with_the_second_projections_cast_is_the_gelu_after_the_first_product() -> None:
    torch.manual_seed(0)
    first, second = torch.nn.Linear(32, 64).to(torch.bfloat16), torch.nn.Linear(64, 48).to(torch.bfloat16)
    x = torch.randn(3, 7, 32).to(torch.bfloat16)
    after_the_product = fp8.Fp8Linear(second)(fp8.Fp8Linear(first, "gelu_tanh")(x))
    on_the_input = fp8.Fp8Linear(first), fp8.Fp8Linear(second, input_activation="gelu_tanh")
    out = on_the_input[1](on_the_input[0](x))
    torch.testing.assert_close(out, after_the_product, rtol=0, atol=0)
    hidden = on_the_input[0](x)
    torch.testing.assert_close(out, fp8.reference_fp8_linear(on_the_input[1], hidden), atol=0.02, rtol=0.02)
    with pytest.raises(ValueError, match="not both"):
        fp8.Fp8Linear(second, "gelu_tanh", input_activation="gelu_tanh")


def test_the_kernels_gelu_formula_is_torchs_tanh_gelu() -> None:
    # The Triton kernel writes the tanh GELU as x * sigmoid(2u); the same constants through torch give torch's GELU.
    x = torch.linspace(-12, 12, 4001, dtype=torch.float64)
    inner = fp8.GELU_TANH_C * (x + fp8.GELU_TANH_CUBE * x**3)
    torch.testing.assert_close(x * torch.sigmoid(2 * inner), torch.nn.functional.gelu(x, approximate="tanh"))


def test_the_gelu_and_cast_op_is_registered_for_the_compiler_and_matches_its_reference() -> None:
    x = (torch.randn(5, 96) * 3).to(torch.bfloat16)
    quantized, scale = fp8.gelu_quantize_rows(x)
    expected_q, expected_scale = fp8.gelu_quantize_reference(x)
    assert quantized.dtype == torch.float8_e4m3fn and scale.shape == (5, 1)
    torch.testing.assert_close(scale, expected_scale, rtol=0, atol=0)
    assert torch.equal(quantized.view(torch.uint8), expected_q.view(torch.uint8))
    torch.library.opcheck(fp8.gelu_quantize_rows, (x,), test_utils=("test_schema", "test_faketensor"))


def test_fused_gelu_install_moves_the_feed_forwards_gelu_and_undo_takes_it_back() -> None:
    model = transformer()
    plain = fp8.install(model)
    expected = forward(model)
    plain.undo()
    installed = fp8.install(model, fuse_gelu=True)
    assert installed.gelu_fused and installed.layers == LAYERS_PER_BLOCK * CONFIG["num_layers"]
    for block in model.blocks:
        first, second = block.ffn.net[0], block.ffn.net[2]
        assert (first.activation, first.input_activation) == ("", "")
        assert (second.activation, second.input_activation) == ("", "gelu_tanh")
        assert block.attn1.to_qkv.input_activation == ""
    torch.testing.assert_close(forward(model), expected, rtol=0, atol=0)  # the same arithmetic, in another place
    installed.undo()
    assert not installed.gelu_fused and type(model.blocks[0].ffn.net[0]).__name__ == "GELU"
    # without the feed-forward, nothing moves
    assert not fp8.install(transformer(), ("attention",), fuse_gelu=True).gelu_fused


def test_off_a_gpu_the_gelu_kernel_is_not_used_and_the_width_is_the_feed_forwards() -> None:
    assert "CUDA" in fp8.gelu_kernel_problem("cpu")
    model = transformer()
    assert fp8.ffn_width(model) == CONFIG["ffn_dim"]
    fp8.install(model)
    assert fp8.ffn_width(model) == CONFIG["ffn_dim"]
    assert fp8.ffn_width(torch.nn.Linear(4, 4)) == 0


def test_fused_gelu_takes_over_the_engines_gelu_projection_too() -> None:
    model = transformer()
    with_kernels = kernels.install(model, "default")
    unfused = fp8.install(model)
    expected = forward(model)
    unfused.undo()
    installed = fp8.install(model, fuse_gelu=True)
    assert model.blocks[0].ffn.net[2].input_activation == "gelu_tanh"
    torch.testing.assert_close(forward(model), expected, atol=0.02, rtol=0.02)
    installed.undo()
    assert isinstance(model.blocks[0].ffn.net[0], kernels.EpilogueGELU)
    with_kernels.undo()


def test_fast_accumulation_reaches_every_product_and_survives_the_fall_back_to_eager(monkeypatch) -> None:
    asked: list[bool] = []
    scaled_mm = torch._scaled_mm

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("use_fast_accum", False))
        return scaled_mm(*args, **kwargs)

    model = transformer()
    expected = forward(model)
    installed = fp8.install(model, fast_accum=True)
    assert installed.fast_accum
    assert all(
        module.fast_accum for module in model.modules() if isinstance(module, fp8.Fp8Linear)
    ) and "fast_accum=True" in repr(model.blocks[0].ffn.net[2])
    monkeypatch.setattr(torch, "_scaled_mm", recording)
    assert fp8.relative_rms(forward(model), expected) < 0.1
    assert asked == [True] * (LAYERS_PER_BLOCK * CONFIG["num_layers"])
    installed.undo()
    assert not installed.fast_accum and not any(isinstance(m, fp8.Fp8Linear) for m in model.modules())
    # the setup's fall back to eager puts fp8 back as it was, fast accumulation and all
    setup = GpuSetup("cpu", compile="off")
    assert setup.fp8_options.fast_accum  # what --quantization fp8 serves
    model = transformer()
    setup.installed_kernels = kernels.install(model, "default")
    setup.fp8 = fp8.install(model, fast_accum=True)
    setup.fall_back_to_eager(type("Pipe", (), {"transformer": model})())
    assert setup.fp8.fast_accum and model.blocks[0].attn1.to_qkv.fast_accum
    # exact accumulation stays the layer's default
    assert not fp8.Fp8Linear(torch.nn.Linear(32, 16)).fast_accum
