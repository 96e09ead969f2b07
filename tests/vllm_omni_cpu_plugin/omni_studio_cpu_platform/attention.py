"""Diffusion attention on CPU for vLLM-Omni. TEST SCAFFOLDING (see the package docstring): never use it in
production. Kept apart from ``.platform`` because this import needs the platform to be resolved already."""

from __future__ import annotations

import torch
from vllm_omni.diffusion.attention.backends.abstract import AttentionMetadata
from vllm_omni.diffusion.attention.backends.sdpa import SDPABackend, SDPAImpl


class CpuSDPAImpl(SDPAImpl):
    """SDPA on CPU. ``AttentionImpl.forward`` dispatches only to known platforms (cuda, hip, npu, xpu,
    musa) and raises NotImplementedError for an out-of-tree one, so call the device-agnostic body."""

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_metadata: AttentionMetadata | None = None,
    ) -> torch.Tensor:
        return self._forward_impl(query, key, value, attn_metadata, mask_mode="broadcast_k")


class CpuSDPABackend(SDPABackend):
    """vLLM-Omni's TORCH_SDPA backend with the CPU impl; the name stays "SDPA" for its own checks."""

    @staticmethod
    def get_impl_cls() -> type[SDPAImpl]:
        return CpuSDPAImpl
