"""Picking the attention kernel for a transformer on this GPU, by timing torch's fused kernels."""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)

# The SDPA kernel that each diffusers attention backend the engine may pick runs on, as studio.engine.gpu.kernels
# names it (None: the transformer's default attention).
SDPA_KERNEL_OF_BACKEND = {
    None: "default",
    "_native_cudnn": "cudnn",
    "_native_flash": "flash",
    "_native_efficient": "efficient",
}


def fastest_attention_backend(transformer: Any, dtype: torch.dtype) -> str:
    """Time torch's fused attention kernels on this GPU at the transformer's head size and a 480p-sized
    sequence, and name the fastest as a diffusers attention backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config = transformer.config
    heads = int(getattr(config, "num_attention_heads", 12))
    head_dim = int(getattr(config, "attention_head_dim", 128))
    q, k, v = (torch.randn(2, heads, 8192, head_dim, device="cuda", dtype=dtype) for _ in range(3))
    candidates = {
        "_native_cudnn": SDPBackend.CUDNN_ATTENTION,
        "_native_flash": SDPBackend.FLASH_ATTENTION,
        "_native_efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    times: dict[str, float] = {}
    for name, kernel in candidates.items():
        try:
            with sdpa_kernel(kernel):
                for _ in range(2):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(5):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v)
                end.record()
                end.synchronize()
                times[name] = start.elapsed_time(end) / 5
        except RuntimeError:  # kernel not available for this GPU, dtype or shape
            continue
    log.info("attention kernels (ms per call): %s", {k: round(v, 3) for k, v in times.items()})
    return min(times, key=times.__getitem__) if times else "default"
