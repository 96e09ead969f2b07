"""`omni-studio bench`: the terminal side of the bench (studio/backend/bench.py): its flags, the run, the summary
table and the recommendation. The bench's own flags are BenchConfig's fields, the form the page uses too."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import BaseModel, Field

from studio.backend.bench_config import BenchConfig, BenchConfigError, parse_bench_config
from studio.cli.exits import EXIT_FAILED, EXIT_USAGE, fail
from studio.cli.flags import Subcommands, add_model_flags, model_values
from studio.cli.studio_flags import add_engine_flags, studio_settings

# Prompts come from a file here (--prompts FILE, a BenchCommand field); the rest of the form maps one to one.
CONFIG_FIELDS = tuple(name for name in BenchConfig.model_fields if name != "prompts")
CONFIG_DEST = "bench_"  # BenchConfig.guardrails is not StudioSettings.guardrails (--server-guardrails)
SUMMARY_COLUMNS = {
    "tier": "tier",
    "guard": "guardrails",
    "conc": "concurrency",
    "endpoints": "endpoints",
    "done": "completed",
    "failed": "failed",
    "p50 s": "latency_p50_s",
    "p90 s": "latency_p90_s",
    "p99 s": "latency_p99_s",
    "queue s": "queue_wait_mean_s",
    "infer s": "inference_mean_s",
    "videos/min": "videos_per_min",
    "goodput": "goodput",
}


class BenchCommand(BaseModel):
    """What the terminal's bench adds to the form: where the servers and the prompts come from, where the report goes."""

    replicas: int = Field(default=1, ge=1, description="managed servers behind the router")
    prompts_file: Path | None = Field(
        default=None,
        description="a file with one prompt per line (default: built-in prompts)",
        json_schema_extra={"flags": ("--prompts",)},
    )
    out: Path = Field(description="report folder: report.json, requests.csv, summary.csv, PNG plots")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "bench",
        help="measure latency and throughput over concurrency, tiers, replicas",
        description="Latency and throughput per cell (tier x guardrails x concurrency), closed loop or at a "
        "request rate; a report folder and a recommendation per tier.",
    )
    add_engine_flags(parser)
    group = parser.add_argument_group("bench")
    add_model_flags(group, BenchCommand)
    add_model_flags(group, BenchConfig, CONFIG_FIELDS, dest_prefix=CONFIG_DEST)


def _config(args: argparse.Namespace, command: BenchCommand) -> BenchConfig:
    values = model_values(args, BenchConfig, CONFIG_FIELDS, dest_prefix=CONFIG_DEST)
    if command.prompts_file is not None:
        text = command.prompts_file.read_text(encoding="utf-8")
        if not text.strip():
            raise BenchConfigError(f"{command.prompts_file} has no prompts")
        values["prompts"] = text
    return parse_bench_config(values)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "–" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    command = BenchCommand(**model_values(args, BenchCommand))
    try:
        config = _config(args, command)
    except (BenchConfigError, OSError) as exc:
        return fail(str(exc), EXIT_USAGE)
    settings = studio_settings(args)

    import asyncio

    from studio.startup import collector_paused

    with collector_paused():
        from rich.console import Console
        from rich.table import Table

        from studio.backend.bench import run_bench
        from studio.backend.launchers import LaunchError
        from studio.backend.supervisor import ServerStartError

    console = Console(stderr=True, soft_wrap=True)
    try:
        report = asyncio.run(run_bench(settings, config, command.out, replicas=command.replicas, console=console))
    except (ServerStartError, LaunchError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return EXIT_FAILED
    table = Table(title="omni-studio bench")
    for name in SUMMARY_COLUMNS:
        table.add_column(name, justify="right")
    for row in report["cells"]:
        table.add_row(*(_cell(row[key]) for key in SUMMARY_COLUMNS.values()))
    out = Console(soft_wrap=True, width=None if Console().is_terminal else 160)
    out.print(table)
    out.print(f"report: {command.out / 'report.json'} (requests.csv, summary.csv, *.png beside it)")
    out.print("recommendation:")
    for line in report["recommendation"]:
        out.print(f"  {line}")
    return 0
