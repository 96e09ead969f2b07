"""What a benchmark's report says about where it ran, and how it is printed and written."""

from __future__ import annotations

import contextlib
import json
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> str:
    """The GPU and torch where there is one, else the CPU's name, its cores and Python's version."""
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    except ImportError:
        pass
    cores = len(os.sched_getaffinity(0))
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), name)
    return f"{name}, {cores} cores, Python {platform.python_version()}"


def write_report(report: dict[str, Any], out: Path | None) -> None:
    """The figures printed (each job's left out) and, with `out`, written whole as JSON."""
    print(json.dumps({k: v for k, v in report.items() if k != "jobs"}, indent=1))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
