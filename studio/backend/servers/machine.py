"""What this machine offers a fleet: its GPUs, counted once through NVML (never through torch, which the studio's
process does not load), and its CPU cores."""

from __future__ import annotations

import contextlib
import os


def gpus_found() -> list[str]:
    """The GPUs this process may give its servers, by NVML's index: every GPU NVML finds, narrowed to those
    CUDA_VISIBLE_DEVICES names where it names them by index (as CUDA itself would); none where there is no
    NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        found = [str(index) for index in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return visible(found, os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible(found: list[str], cuda_visible: str | None) -> list[str]:
    """`found` as CUDA_VISIBLE_DEVICES narrows it: its indices, in its order, up to the first it does not hold
    (CUDA stops there too). Names by UUID are left to CUDA: all of `found` is given then."""
    if cuda_visible is None:
        return found
    names = [name.strip() for name in cuda_visible.split(",") if name.strip()]
    if not all(name.lstrip("-").isdigit() for name in names):
        return found
    shown: list[str] = []
    for name in names:
        if name not in found or name in shown:
            break
        shown.append(name)
    return shown


def cpu_cores() -> int:
    """The cores this process may use (its affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
