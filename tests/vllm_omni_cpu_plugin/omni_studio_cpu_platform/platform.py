"""The CPU ``OmniPlatform``. TEST SCAFFOLDING: never use it in production.

vLLM-Omni has no CPU platform; this one exists only so that Omni Studio's integration tests can run the
real vLLM-Omni server on a CPU. It reports one "device" (the CPU), psutil memory figures, no-op
synchronisation, no torch.compile, and torch's scaled_dot_product_attention for diffusion attention
(``.attention``).
"""

from __future__ import annotations

from typing import Any

import psutil
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

# Imported lazily by vLLM-Omni's selector: importing vllm_omni.diffusion.attention here would be circular,
# because that package reads ``vllm_omni.platforms.current_omni_platform`` at import time.
_BACKEND_PATH = "omni_studio_cpu_platform.attention.CpuSDPABackend"


class CpuOmniPlatform(OmniPlatform, CpuPlatform):
    """vLLM-Omni's platform interface on top of vLLM's CpuPlatform (OmniPlatform first in the MRO, so
    every method that OmniPlatform leaves as ``raise NotImplementedError`` must be given here)."""

    _omni_enum = OmniPlatformEnum.OOT

    # --- worker classes and deploy configs: the same paths as vLLM-Omni's CUDA platform ---
    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        return "vllm_omni.worker.gpu_ar_worker.GPUARWorker"

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        return "vllm_omni.worker.gpu_generation_worker.GPUGenerationWorker"

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/deploy"

    # --- capabilities ---
    @classmethod
    def get_diffusion_attn_backend_cls(
        cls, selected_backend: str | None, head_size: int, allow_trtllm_default: bool = False
    ) -> str:
        if selected_backend is not None and selected_backend.upper() not in ("TORCH_SDPA", "SDPA"):
            raise ValueError(f"the CPU test platform runs only TORCH_SDPA attention, not {selected_backend}")
        return _BACKEND_PATH

    @classmethod
    def supports_diffusion_dense_flash_attention(cls) -> bool:
        return False

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False  # keeps start-up fast and avoids a C++ toolchain dependency

    # --- the one "device" ---
    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "cpu"

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None

    @classmethod
    def empty_cache(cls) -> None:
        return None

    # --- memory: host RAM via psutil; the allocator statistics that CUDA has do not exist on CPU ---
    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return int(psutil.virtual_memory().available)

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return int(psutil.virtual_memory().total)

    @classmethod
    def reset_peak_memory_stats(cls, device: Any = None) -> None:
        return None

    @classmethod
    def max_memory_allocated(cls, device: Any = None) -> int:
        return 0

    @classmethod
    def max_memory_reserved(cls, device: Any = None) -> int:
        return 0

    @classmethod
    def memory_allocated(cls, device: Any = None) -> int:
        return 0
