"""SageAttention (github.com/thu-ml/SageAttention: q and k in int8, p·v in fp8 where the GPU has it) as the kernel of
the transformer's attention: a lever that trades a little precision for speed, off unless asked for with
`--attention-backend sage`.

SageAttention's CUDA kernels are not on the package index (its `sageattention` 1.0.6 is the Triton version, slower
than cuDNN on Hopper): on a Hopper GPU where no `sageattention` with them is importable, the engine builds them at its
first start and caches them (studio.engine.gpu.sage_build); on other GPUs the package must be built for the GPU and
be importable. Where neither holds, the engine refuses to start with it rather than serve exact attention under the
lever's name. The kernel runs inside the engine's attention op (studio.engine.gpu.kernels.attention_bnhd), so the
compiled blocks, CUDA graphs and Ulysses take it as they take cuDNN's. It runs in self- and cross-attention alike
(every attention the engine's processor handles); the fused kernel picked at start serves what that processor
leaves to diffusers.
"""

from __future__ import annotations

import functools

import torch

SAGE_SETTING = "sage"  # the --attention-backend value that asks for it
# The compute capabilities `sageattn` has a kernel for, and the flag of sageattention.core that says whether that
# kernel's CUDA module was built (None: its Triton kernel, always there).
KERNEL_FLAGS: dict[tuple[int, int], str | None] = {
    (8, 0): "SM80_ENABLED",
    (8, 6): None,
    (8, 9): "SM89_ENABLED",
    (9, 0): "SM90_ENABLED",
    (12, 0): "SM89_ENABLED",
}
# On Hopper, q·k's int8 scales per warp (a 64-row block of q) rather than `sageattn`'s per thread: a little
# faster, with the same error against float32 attention (benchmarks/RESULTS.md, attention kernels).
HOPPER_QK_GRANULARITY = "per_warp"
# A lossy kernel: the start-up check of the engine's kernels allows this much more than for exact ones; its effect
# on a video is measured against exact attention in benchmarks/gpu/levers_gpu.py.
MAX_SAGE_FORWARD_DIFFERENCE = 0.1


class SageUnavailable(RuntimeError):
    """--attention-backend sage cannot run here; the message says why in a user's words."""


def sage_problem(device: str) -> str | None:
    """None where SageAttention's kernels run on `device` (on Hopper, after building them at a first start where no
    importable package has them); else why not."""
    if device != "cuda" or not torch.cuda.is_available():
        return f"SageAttention needs a CUDA GPU (this engine runs on {device})"
    capability = torch.cuda.get_device_capability()
    if capability not in KERNEL_FLAGS:
        return f"SageAttention has no kernel for compute capability {capability[0]}.{capability[1]}"
    problem = _package_problem(capability)
    if problem is None or capability != (9, 0):
        return problem
    from studio.engine.gpu import sage_build

    try:
        sage_build.activate(sage_build.hopper_package())
    except sage_build.SageBuildError as exc:
        return f"{problem}, and the engine cannot build SageAttention's Hopper kernels here: {exc}"
    return _package_problem(capability)


def _package_problem(capability: tuple[int, int]) -> str | None:
    """None where the importable `sageattention` has the CUDA kernel of `capability`; else why not."""
    try:
        from sageattention import core
    except Exception as exc:  # not installed, or built for another torch or CUDA: the import itself says which
        return f"the sageattention package cannot be imported ({type(exc).__name__}: {exc})"
    flag = KERNEL_FLAGS[capability]
    if flag is not None and not getattr(core, flag, False):
        return (
            f"the importable sageattention package has no kernels of compute capability "
            f"{capability[0]}.{capability[1]} ({flag} is false)"
        )
    return None


@functools.cache
def _is_hopper(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) == (9, 0)


def sage_attention_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention over (B, N, H, D) tensors (last dimension contiguous) by SageAttention's kernel for this GPU;
    the result (B, N, H, D), in q's dtype. On Hopper its sm90 kernel with HOPPER_QK_GRANULARITY, elsewhere
    `sageattn`'s choice."""
    import sageattention

    if q.is_cuda and _is_hopper(q.device.index or 0):
        return sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(
            q, k, v, tensor_layout="NHD", is_causal=False, qk_quant_gran=HOPPER_QK_GRANULARITY
        )
    return sageattention.sageattn(q, k, v, tensor_layout="NHD", is_causal=False)
