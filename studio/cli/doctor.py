"""`omni-studio doctor`: what this machine offers for video generation (studio/backend/doctor.py gathers it)."""

from __future__ import annotations

import argparse
import json

from studio.cli.studio_flags import add_studio_flags, studio_settings
from studio.cli.subcommands import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "doctor",
        help="report GPUs, CUDA, vLLM-Omni, ports and disk",
        description="Python, torch and its CUDA, GPUs and driver (NVML), vLLM-Omni, ports and free disk.",
    )
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    add_studio_flags(parser, ("vllm_executable",))


def run(args: argparse.Namespace) -> int:
    from studio.backend.doctor import collect_report, format_report

    report = collect_report(studio_settings(args))
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
