"""FlashAttention 3 (github.com/Dao-AILab/flash-attention, `hopper/`) as the kernel of the transformer's attention:
exact attention, faster than cuDNN's on Hopper at the engine's long sequences (benchmarks/RESULTS.md, attention
kernels), off unless asked for with `--attention-backend flash3`.

It is not on the package index: on a Hopper GPU where no `flash_attn_interface` with its kernel is importable, the
engine builds the one kernel it calls at its first start and caches it (studio.engine.gpu.flash3_build). Where that
cannot be, the engine refuses to start with it rather than serve another kernel under its name. It runs inside the
engine's attention op (studio.engine.gpu.kernels.attention_bnhd), so the compiled blocks, CUDA graphs and Ulysses take
it as they take cuDNN's.
"""

from __future__ import annotations

import torch

FLASH3_SETTING = "flash3"  # the --attention-backend value that asks for it


class Flash3Unavailable(RuntimeError):
    """--attention-backend flash3 cannot run here; the message says why in a user's words."""


def flash3_problem(device: str) -> str | None:
    """None where FlashAttention 3's kernel runs on `device` (after building it at a first start where no importable
    package has it); else why not."""
    if device != "cuda" or not torch.cuda.is_available():
        return f"FlashAttention 3 needs a CUDA GPU (this engine runs on {device})"
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        return (
            f"FlashAttention 3's kernel is for Hopper GPUs (compute capability 9.0), and this GPU is "
            f"{capability[0]}.{capability[1]}"
        )
    problem = _package_problem()
    if problem is None:
        return None
    from studio.engine.gpu import flash3_build, kernel_build

    try:
        flash3_build.activate(flash3_build.hopper_package())
    except kernel_build.KernelBuildError as exc:
        return f"{problem}, and the engine cannot build FlashAttention 3's Hopper kernel here: {exc}"
    return _package_problem()


def _package_problem() -> str | None:
    """None where `flash_attn_interface` imports with its kernel; else why not."""
    try:
        import flash_attn_interface  # noqa: F401
    except Exception as exc:  # not built, or built for another torch or CUDA: the import itself says which
        return f"FlashAttention 3 (flash_attn_interface) cannot be imported ({type(exc).__name__}: {exc})"
    return None


def flash3_attention_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact attention over (B, N, H, D) tensors by FlashAttention 3's forward; the result (B, N, H, D)."""
    from flash_attn_interface import flash_attn_func

    out = flash_attn_func(q, k, v, causal=False)
    return out[0] if isinstance(out, tuple) else out
