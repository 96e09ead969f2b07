"""CPU platform plugin for vLLM-Omni: TEST SCAFFOLDING, never use it in production.

It exists only because vLLM-Omni has no CPU platform; it lets the project's integration tests run the real
vLLM-Omni server, CLI and HTTP layer on a CPU (with the tiny random-weight model in assets/tiny-wan).

vLLM-Omni picks its platform from the entry-point group ``vllm_omni.platform_plugins``: each registered
function returns the dotted path of an ``OmniPlatform`` subclass, or None when it does not apply. Without a
plugin a CPU-only host gets ``UnspecifiedOmniPlatform`` and the diffusion worker dies in ``init_device``
with ``NotImplementedError``. The class lives in ``.platform`` so that this module stays import-light:
vLLM-Omni loads every entry point while it is still resolving its platform.
"""

from __future__ import annotations

import os

__all__ = ["PLATFORM_CLASS", "cpu_platform_plugin"]

PLATFORM_CLASS = "omni_studio_cpu_platform.platform.CpuOmniPlatform"


def cpu_platform_plugin() -> str | None:
    """Entry point: the CPU platform's dotted path, unless OMNI_STUDIO_CPU_PLATFORM=0 switches it off."""
    if os.environ.get("OMNI_STUDIO_CPU_PLATFORM", "1") == "0":
        return None
    return PLATFORM_CLASS
