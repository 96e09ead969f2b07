"""Kernel substitutions the engine makes in a diffusers Wan transformer on a GPU.

Each keeps the module's arithmetic (the same weights, the same normalisation, rotation and activation) and
changes only how it is issued, where the compiled module would otherwise spend a pass over memory that a
better-placed kernel avoids (measured per kernel by benchmarks/gpu/profile_gpu.py):

- the feed-forward's first projection with its bias and tanh-GELU in the cuBLASLt epilogue: the
  (tokens x ffn_dim) result is written once instead of written, read and written again;
- q and k of self-attention normalised (RMSNorm across heads) and rotated (rotary embedding) by one Triton
  kernel that reads each row once from the fused q/k/v projection and writes the attention's input;
- attention on (batch, tokens, heads, head_dim) tensors as they come from the projections: the kernel reads
  the strided views and writes its output in that order, so the copies into and out of the
  (batch, heads, tokens, head_dim) layout are gone.

Each is an opaque custom op, so that the compiler keeps it whole. `install` puts them into a transformer and
returns a handle that takes them out again; `install_checked` keeps them only where a forward with them matches
one without, which the engine runs before it serves. Off a GPU, or without Triton, the ops run a plain torch
version of the same arithmetic (the CPU tests check it against diffusers' own modules).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)

# "sage": SageAttention's 8-bit kernel (studio.engine.gpu.sage), a lossy lever; "flash3": FlashAttention 3's exact
# Hopper kernel, "flash3-fp8" its 8-bit form, a lossy lever (studio.engine.gpu.flash3); the others are SDPA's.
SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math", "default", "sage", "flash3", "flash3-fp8")
# The kernels change only the order of a few roundings: a forward with them must match the plain one to within
# this share of its largest output value.
MAX_KERNEL_DIFFERENCE = 0.02


# --- feed-forward: GELU in the product's epilogue -------------------------------------------------------


@torch.library.custom_op("omni_engine::linear_gelu_tanh", mutates_args=())
def linear_gelu_tanh(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight.T + bias, approximate="tanh"); on a GPU one cuBLASLt call with the bias and the GELU in
    the product's epilogue (cuBLASLt's GELU is the tanh form)."""
    if not x.is_cuda:  # the CPU's fused op takes the exact (erf) GELU, not the tanh form
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias), approximate="tanh")
    rows = x.reshape(-1, x.shape[-1])
    # torch's only way to the cuBLASLt GELU epilogue: no public op takes the activation into the product.
    out = torch._addmm_activation(bias, rows, weight.t(), use_gelu=True)
    return out.view(*x.shape[:-1], weight.shape[0])


@linear_gelu_tanh.register_fake
def _linear_gelu_tanh_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class EpilogueGELU(torch.nn.Module):
    """Stands in for diffusers' `GELU(approximate="tanh")` projection; its `proj` Linear is kept, so the
    weights, their names and their dtype are unchanged."""

    def __init__(self, proj: torch.nn.Linear):
        super().__init__()
        self.proj = proj

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return linear_gelu_tanh(hidden_states, self.proj.weight, self.proj.bias)


# --- q/k normalisation and rotary embedding in one pass -------------------------------------------------


def qk_norm_rope_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dimension (all heads), then Wan's rotary embedding on interleaved pairs, in
    float32; q, k (B, N, C) -> (B, N, heads, C // heads). `cos`, `sin`: (N, head_dim)."""

    def one(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        y = torch.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).unflatten(-1, (heads, -1))
        even, odd = y.unflatten(-1, (-1, 2)).unbind(-1)
        c = cos.float()[None, :, None, 0::2]
        s = sin.float()[None, :, None, 1::2]
        return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2).to(x.dtype)

    return one(q, q_weight), one(k, k_weight)


@functools.cache
def _qk_norm_rope_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def omni_qk_norm_rope(
        q_ptr,
        k_ptr,
        qw_ptr,
        kw_ptr,
        cos_ptr,
        sin_ptr,
        q_out,
        k_out,
        q_stride,
        k_stride,
        tokens,
        eps,
        C: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        PAIRS_BLOCK: tl.constexpr,
    ):
        # One program per row (token of one sample): q and k each read once, normalised across all heads,
        # rotated pair by pair, written once in (B, N, H, D) order.
        row = tl.program_id(0).to(tl.int64)
        token = row % tokens
        pair = tl.arange(0, PAIRS_BLOCK)
        mask = pair < C // 2
        even_col = 2 * pair
        freq = token * HEAD_DIM + even_col % HEAD_DIM
        cos = tl.load(cos_ptr + freq, mask=mask, other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + freq + 1, mask=mask, other=0.0).to(tl.float32)
        for which in tl.static_range(2):
            src = q_ptr + row * q_stride if which == 0 else k_ptr + row * k_stride
            weight = qw_ptr if which == 0 else kw_ptr
            dst = (q_out if which == 0 else k_out) + row * C
            even = tl.load(src + even_col, mask=mask, other=0.0).to(tl.float32)
            odd = tl.load(src + even_col + 1, mask=mask, other=0.0).to(tl.float32)
            inv = tl.rsqrt(tl.sum(even * even + odd * odd, axis=0) / C + eps)
            even = even * inv * tl.load(weight + even_col, mask=mask, other=0.0).to(tl.float32)
            odd = odd * inv * tl.load(weight + even_col + 1, mask=mask, other=0.0).to(tl.float32)
            tl.store(dst + even_col, (even * cos - odd * sin).to(dst.dtype.element_ty), mask=mask)
            tl.store(dst + even_col + 1, (even * sin + odd * cos).to(dst.dtype.element_ty), mask=mask)

    return omni_qk_norm_rope


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`x` (B, N, C) with its last dimension contiguous and its rows evenly spaced, and that spacing."""
    batch, tokens, _ = x.shape
    if x.stride(2) != 1 or (batch > 1 and x.stride(0) != tokens * x.stride(1)):
        x = x.contiguous()
    return x, x.stride(1)


def _triton_ready(*tensors: torch.Tensor) -> bool:
    if not all(t.is_cuda for t in tensors):
        return False
    try:
        _qk_norm_rope_kernel()
    except ImportError:
        return False
    return True


@torch.library.custom_op("omni_engine::qk_norm_rope", mutates_args=())
def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`qk_norm_rope_reference`'s arithmetic; on a GPU one Triton kernel for both."""
    batch, tokens, channels = q.shape
    if not _triton_ready(q, k, cos):
        return qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps, heads)
    q, q_stride = _rows(q)
    k, k_stride = _rows(k)
    q_out = q.new_empty((batch, tokens, heads, channels // heads))
    k_out = k.new_empty((batch, tokens, heads, channels // heads))
    pairs_block = 1 << max(0, (channels // 2 - 1).bit_length())
    _qk_norm_rope_kernel()[(batch * tokens,)](
        q,
        k,
        q_weight,
        k_weight,
        cos.contiguous(),
        sin.contiguous(),
        q_out,
        k_out,
        q_stride,
        k_stride,
        tokens,
        eps,
        C=channels,
        HEAD_DIM=channels // heads,
        PAIRS_BLOCK=pairs_block,
        num_warps=4,
    )
    return q_out, k_out


@qk_norm_rope.register_fake
def _qk_norm_rope_fake(q, k, q_weight, k_weight, cos, sin, eps, heads):  # type: ignore[no-untyped-def]
    batch, tokens, channels = q.shape
    shape = (batch, tokens, heads, channels // heads)
    return q.new_empty(shape), k.new_empty(shape)


# --- attention in (B, N, H, D) order ---------------------------------------------------------------------


@torch.library.custom_op("omni_engine::attention_bnhd", mutates_args=())
def attention_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str) -> torch.Tensor:
    """Scaled dot-product attention over (B, N, H, D) tensors (strided views are fine), returning a
    contiguous (B, N, H, D) result. `backend`: one of SDPA_BACKENDS."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend == "sage":
        from studio.engine.gpu.sage import sage_attention_bnhd

        return sage_attention_bnhd(q, k, v).contiguous()
    if backend == "flash3":
        from studio.engine.gpu.flash3 import flash3_attention_bnhd

        return flash3_attention_bnhd(q, k, v).contiguous()
    if backend == "flash3-fp8":
        from studio.engine.gpu.flash3 import flash3_fp8_attention_bnhd

        return flash3_fp8_attention_bnhd(q, k, v).contiguous()

    kernels = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    q_t, k_t, v_t = (x.transpose(1, 2) for x in (q, k, v))
    if backend in kernels:
        with sdpa_kernel(kernels[backend]):
            try:
                out = torch.nn.functional.scaled_dot_product_attention(q_t, k_t, v_t)
            except RuntimeError:  # a kernel that takes only dense inputs: give it copies
                q_t, k_t, v_t = (x.contiguous() for x in (q_t, k_t, v_t))
                out = torch.nn.functional.scaled_dot_product_attention(q_t, k_t, v_t)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(q_t, k_t, v_t)
    # cuDNN writes its output in the layout of q, so this transpose is usually free; the result must be
    # contiguous either way, as the fake below says.
    return out.transpose(1, 2).contiguous()


@attention_bnhd.register_fake
def _attention_bnhd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str) -> torch.Tensor:
    return q.new_empty((*q.shape[:3], v.shape[-1]))


class EngineWanAttnProcessor:
    """Diffusers' Wan attention (fused projections, RMSNorm across heads on q and k, rotary embedding on
    self-attention) with the kernels above; anything else (image key/values, masks, unfused projections) goes
    to the processor it replaced."""

    def __init__(self, replaced: Any, backend: str):
        self.replaced = replaced
        self.backend = backend

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        rotate = rotary_emb is not None
        if not _handles(attn, attention_mask) or (rotate and attn.norm_k.eps != attn.norm_q.eps):
            return self.replaced(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        heads = attn.heads
        if encoder_hidden_states is None:
            q, k, v = attn.to_qkv(hidden_states).chunk(3, dim=-1)
        else:
            q = attn.to_q(hidden_states)
            k, v = attn.to_kv(encoder_hidden_states).chunk(2, dim=-1)
        if rotate:
            cos, sin = (f.reshape(f.shape[-3], f.shape[-1]) for f in rotary_emb)
            q, k = qk_norm_rope(q, k, attn.norm_q.weight, attn.norm_k.weight, cos, sin, attn.norm_q.eps, heads)
        else:
            q = attn.norm_q(q).unflatten(2, (heads, -1))
            k = attn.norm_k(k).unflatten(2, (heads, -1))
        out = attention_bnhd(q, k, v.unflatten(2, (heads, -1)), self.backend)
        out = out.flatten(2, 3).type_as(q)
        return attn.to_out[1](attn.to_out[0](out))


def _handles(attn: Any, attention_mask: torch.Tensor | None) -> bool:
    return (
        attention_mask is None
        and getattr(attn, "add_k_proj", None) is None
        and getattr(attn, "fused_projections", False)
        and isinstance(getattr(attn, "norm_q", None), torch.nn.RMSNorm)
        and isinstance(getattr(attn, "norm_k", None), torch.nn.RMSNorm)
        and attn.norm_q.weight is not None
        and attn.norm_k.weight is not None
        and attn.norm_q.eps is not None
    )


# --- installing --------------------------------------------------------------------------------------------


@dataclass
class Installed:
    """What `install` changed, to undo it."""

    processors: list[tuple[Any, Any]] = field(default_factory=list)  # (attention module, its old processor)
    projections: list[tuple[torch.nn.ModuleList, torch.nn.Module]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {"attention": len(self.processors), "ffn_gelu": len(self.projections)}

    def undo(self) -> None:
        for module, processor in self.processors:
            module.set_processor(processor)
        for net, gelu in self.projections:
            net[0] = gelu
        self.processors, self.projections = [], []


def install(transformer: torch.nn.Module, backend: str) -> Installed:
    """Put the engine's kernels into a diffusers Wan transformer whose q/k/v projections are fused.
    `backend`: the SDPA kernel attention runs on (one of SDPA_BACKENDS)."""
    from diffusers.models.activations import GELU

    if backend not in SDPA_BACKENDS:
        raise ValueError(f"backend must be one of {SDPA_BACKENDS}, got {backend!r}")
    installed = Installed()
    for module in transformer.modules():
        if type(module).__name__ == "WanAttention" and _handles(module, None):
            installed.processors.append((module, module.processor))
            module.set_processor(EngineWanAttnProcessor(module.processor, backend))
        net = getattr(module, "net", None)
        if isinstance(net, torch.nn.ModuleList) and len(net):
            first = net[0]
            if isinstance(first, GELU) and first.approximate == "tanh" and first.proj.bias is not None:
                installed.projections.append((net, first))
                net[0] = EpilogueGELU(first.proj)
    return installed


def install_checked(
    transformer: torch.nn.Module, backend: str, device: str, max_difference: float = MAX_KERNEL_DIFFERENCE
) -> Installed | None:
    """`install`, kept only if one forward on a small input with the kernels matches the forward without them (to
    within `max_difference` of its largest output value); else the transformer is left as it was and None comes
    back."""
    inputs = _small_transformer_inputs(transformer, device)
    installed = None
    try:
        with torch.inference_mode():
            expected = transformer(**inputs, return_dict=False)[0].float()
            installed = install(transformer, backend)
            actual = transformer(**inputs, return_dict=False)[0].float()
        difference = ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()
        if not difference <= max_difference:
            raise RuntimeError(f"the forward with them differs by {difference:.2%} of its range")
    except Exception as exc:  # the transformer serves as diffusers wrote it
        log.warning("the engine's kernels are not used (%s: %s)", type(exc).__name__, exc)
        if installed is not None:
            installed.undo()
        return None
    log.info("the engine's kernels: %s (forward within %.3f%% of the plain one)", installed.counts, 100 * difference)
    return installed


def _small_transformer_inputs(transformer: Any, device: str) -> dict[str, torch.Tensor]:
    """A random input for one forward of a Wan transformer: 2 samples of 2 latent frames of 16x16, 16 text
    tokens (the kernels run at the model's own widths, so this checks them at little cost)."""
    config = transformer.config
    generator = torch.Generator(device=device).manual_seed(0)
    dtype = transformer.dtype
    return {
        "hidden_states": torch.randn(2, config.in_channels, 2, 16, 16, generator=generator, device=device).to(dtype),
        "timestep": torch.tensor([250.0, 750.0], device=device),
        "encoder_hidden_states": torch.randn(2, 16, config.text_dim, generator=generator, device=device).to(dtype),
    }
