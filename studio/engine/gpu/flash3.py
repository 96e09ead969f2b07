"""FlashAttention 3 (github.com/Dao-AILab/flash-attention, `hopper/`) as the kernel of the transformer's attention, in
two forms, each off unless asked for:

- `--attention-backend flash3`: exact attention in bf16, faster than cuDNN's on Hopper at the engine's long sequences
  (benchmarks/RESULTS.md, attention kernels);
- `--attention-backend flash3-fp8`: 8-bit attention, a lever that trades a little precision for speed. q, k and v go
  into fp8 (e4m3) with one scale per batch row and head, which the kernel takes back out of its products; k first
  loses its mean over the tokens, which leaves every softmax as it was (each query's scores move by one constant)
  and keeps k's spread inside fp8's few mantissa bits. The kernel keeps p·v's probabilities in fp8 too.

It is not on the package index: on a Hopper GPU where no `flash_attn_interface` with its kernel is importable, the
engine builds the kernels it calls at its first start and caches them (studio.engine.gpu.flash3_build). Where that
cannot be, the engine refuses to start with it rather than serve another kernel under its name. It runs inside the
engine's attention op (studio.engine.gpu.kernels.attention_bnhd), so the compiled blocks, CUDA graphs and Ulysses take
it as they take cuDNN's.
"""

from __future__ import annotations

import torch

FLASH3_SETTING = "flash3"  # the --attention-backend value that asks for it
FLASH3_FP8_SETTING = "flash3-fp8"  # ... and for its 8-bit form
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max
# A lossy kernel: the start-up check of the engine's kernels allows this much more than for exact ones; its effect
# on a video is measured against exact attention in benchmarks/gpu/levers_gpu.py.
MAX_FLASH3_FP8_FORWARD_DIFFERENCE = 0.1


class Flash3Unavailable(RuntimeError):
    """--attention-backend flash3 cannot run here; the message says why in a user's words."""


def flash3_problem(device: str, fp8: bool = False) -> str | None:
    """None where FlashAttention 3's kernel (its fp8 form with `fp8`) runs on `device`, after building it at a first
    start where no importable package has it; else why not."""
    if device != "cuda" or not torch.cuda.is_available():
        return f"FlashAttention 3 needs a CUDA GPU (this engine runs on {device})"
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        return (
            f"FlashAttention 3's kernel is for Hopper GPUs (compute capability 9.0), and this GPU is "
            f"{capability[0]}.{capability[1]}"
        )
    problem = _package_problem(fp8)
    if problem is None:
        return None
    from studio.engine.gpu import flash3_build, kernel_build

    try:
        flash3_build.activate(flash3_build.hopper_package())
    except kernel_build.KernelBuildError as exc:
        return f"{problem}, and the engine cannot build FlashAttention 3's Hopper kernel here: {exc}"
    return _package_problem(fp8)


def flash3_fp8_problem(device: str) -> str | None:
    """As flash3_problem, for the fp8 kernel."""
    return flash3_problem(device, fp8=True)


def _package_problem(fp8: bool) -> str | None:
    """None where `flash_attn_interface` imports with its kernel (built with fp8 where `fp8`); else why not."""
    try:
        import flash_attn_interface  # noqa: F401
    except Exception as exc:  # not built, or built for another torch or CUDA: the import itself says which
        return f"FlashAttention 3 (flash_attn_interface) cannot be imported ({type(exc).__name__}: {exc})"
    if fp8:
        try:
            from flash_attn_config import CONFIG

            without_fp8 = CONFIG["build_flags"].get("FLASHATTENTION_DISABLE_FP8", False)
        except Exception:  # a package without the build's config: its own build, taken as complete
            without_fp8 = False
        if without_fp8:
            return "the importable FlashAttention 3 (flash_attn_interface) was built without its fp8 kernels"
    return None


def flash3_attention_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact attention over (B, N, H, D) tensors by FlashAttention 3's forward; the result (B, N, H, D)."""
    from flash_attn_interface import flash_attn_func

    out = flash_attn_func(q, k, v, causal=False)
    return out[0] if isinstance(out, tuple) else out


def fp8_per_head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A (B, N, H, D) tensor in fp8 (e4m3) scaled per batch row and head into fp8's range, and the (B, H) float32
    scales that take it back (x ≈ x8 · scale).

    Each scale is a power of two: dividing by it is exact, and fp8's rounding of a value does not depend on which
    power scales it. So a share of the tokens (a Ulysses rank's queries in cross-attention) rounds each value as the
    whole sequence does, though its largest value, and so its scale, may differ."""
    amax = torch.linalg.vector_norm(x, ord=float("inf"), dim=(1, 3)).float()  # one pass, no |x| written
    tiny = torch.finfo(torch.float32).tiny
    scale = torch.exp2(torch.ceil(torch.log2((amax / FP8_MAX).clamp_min(tiny))))
    return (x / scale.to(x.dtype)[:, None, :, None]).to(FP8), scale


def fp8_attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v in fp8 with their (B, H) scales, as FlashAttention 3's fp8 forward takes them; k without its mean
    over the tokens (softmax(q·kᵀ) is the same: each query's scores all move by q·mean)."""
    q8, q_scale = fp8_per_head(q)
    k8, k_scale = fp8_per_head(k - k.mean(dim=1, keepdim=True))
    v8, v_scale = fp8_per_head(v)
    return q8, k8, v8, q_scale, k_scale, v_scale


def flash3_fp8_kernel(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    q_scale: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> torch.Tensor:
    """FlashAttention 3's fp8 forward over (B, N, H, D) fp8 tensors with the (B, H) scales that take them back."""
    from flash_attn_interface import flash_attn_func

    out = flash_attn_func(q8, k8, v8, causal=False, q_descale=q_scale, k_descale=k_scale, v_descale=v_scale)
    return out[0] if isinstance(out, tuple) else out


def flash3_fp8_attention_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention over (B, N, H, D) tensors by FlashAttention 3's fp8 forward; the result (B, N, H, D) in q's dtype.
    The quantization runs eagerly, inside the engine's attention op: through torch.compile it was no faster
    (benchmarks/RESULTS.md, the engine on FlashAttention 3 at 189 frames)."""
    return flash3_fp8_kernel(*fp8_attention_inputs(q, k, v)).to(q.dtype)
