"""The inputs the engine hands FlashAttention 3's fp8 forward (`--attention-backend flash3-fp8`): q, k and v in fp8
with one scale per batch row and head, k without its mean over the tokens. The kernel runs on Hopper only; this
checks the arithmetic around it on the CPU, against float64 attention."""

from __future__ import annotations

import pytest
import torch

from studio.engine.gpu.flash3 import FP8, FP8_MAX, fp8_attention_inputs, fp8_per_head


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact attention over (B, N, H, D) tensors, in float64."""
    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_each_batch_row_and_head_gets_its_own_power_of_two_scale_filling_fp8s_range():
    x = torch.randn(2, 40, 3, 16)
    x[1, :, 2] *= 1000.0  # one head of one row far larger than the rest
    x8, scale = fp8_per_head(x)
    assert x8.dtype == FP8 and x8.shape == x.shape and scale.shape == (2, 3) and scale.dtype == torch.float32
    assert torch.equal(scale, torch.exp2(torch.log2(scale).round()))
    peaks = x8.float().abs().amax(dim=(1, 3))
    assert (peaks >= FP8_MAX / 2).all() and (peaks <= FP8_MAX).all()  # each head's largest value in fp8's top octave
    back = x8.float() * scale[:, None, :, None]
    assert relative(back[1, :, 2], x[1, :, 2]) < 0.05 and relative(back[0], x[0]) < 0.05


def test_a_share_of_the_tokens_rounds_each_value_as_the_whole_sequence_does():
    torch.manual_seed(1)
    x = torch.randn(1, 64, 2, 16)
    x[:, 40, 0, 3] = 30.0  # the largest value of head 0, in the second share only
    whole8, whole_scale = fp8_per_head(x)
    first8, first_scale = fp8_per_head(x[:, :32])
    assert not torch.equal(first_scale, whole_scale)
    first = first8.float() * first_scale[:, None, :, None]
    whole = (whole8.float() * whole_scale[:, None, :, None])[:, :32]
    # fp8's normal numbers round alike at any power-of-two scale; only values below its smallest normal (2^-6 of the
    # scale) at the larger scale may round otherwise, and by less than that
    normal = x[:, :32].abs() >= 2**-6 * whole_scale[:, None, :, None]
    assert torch.equal(first[normal], whole[normal]) and normal.float().mean() > 0.9
    assert ((first - whole).abs() <= 2**-6 * whole_scale[:, None, :, None]).all()


def test_a_head_of_zeros_stays_zero_and_finite():
    x = torch.randn(1, 8, 2, 16)
    x[:, :, 1] = 0.0
    x8, scale = fp8_per_head(x)
    assert torch.isfinite(scale).all() and x8[:, :, 1].float().abs().max() == 0.0


def test_ks_mean_leaves_attention_as_it_was_and_fp8_keeps_it_close():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 64, 2, 32) for _ in range(3))
    k = k + 4.0 * torch.randn(1, 1, 2, 32)  # a bias shared by every token, as trained keys carry
    exact = attention(q, k, v)
    assert relative(attention(q, k - k.mean(dim=1, keepdim=True), v), exact) < 1e-6  # float32 rounding alone
    q8, k8, v8, q_scale, k_scale, v_scale = fp8_attention_inputs(q, k, v)
    descaled = [x.float() * s[:, None, :, None] for x, s in ((q8, q_scale), (k8, k_scale), (v8, v_scale))]
    smoothed = relative(attention(*descaled), exact)
    unsmoothed = relative(
        attention(*[x.float() * s[:, None, :, None] for x, s in (fp8_per_head(q), fp8_per_head(k), fp8_per_head(v))]),
        exact,
    )
    assert smoothed < 0.05
    assert smoothed < unsmoothed  # the shared bias would take fp8's mantissa bits from what tells keys apart


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_inputs_come_in_the_models_dtypes(dtype):
    q, k, v = (torch.randn(1, 16, 2, 16, dtype=dtype) for _ in range(3))
    q8, k8, v8, *scales = fp8_attention_inputs(q, k, v)
    assert {x.dtype for x in (q8, k8, v8)} == {FP8} and all(s.dtype == torch.float32 for s in scales)
