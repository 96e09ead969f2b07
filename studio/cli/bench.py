"""`omni-studio bench`: the terminal side of the bench (studio/backend/bench/runner.py): its flags, the run, the summary
table and the recommendation. The bench's own flags are BenchConfig's fields, the form the page uses too; the
fleet's (--replicas, --tp, the engine's) are the studio's settings."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import BaseModel, Field

from studio.backend.bench.config import BenchConfig, BenchConfigError, parse_bench_config
from studio.cli import Subcommands
from studio.cli.exits import EXIT_FAILED, EXIT_USAGE, fail
from studio.cli.studio_flags import add_engine_flags, add_group_flags, studio_settings
from studio.config import ClientSettings, FleetSettings
from studio.settings_flags import add_model_flags, model_values

# Prompts and variants come from files here (--prompts FILE, --variants FILE: BenchCommand fields); the rest of
# the form maps one to one.
FROM_FILES = ("prompts", "variants")
CONFIG_FIELDS = tuple(name for name in BenchConfig.model_fields if name not in FROM_FILES)
CONFIG_DEST = "bench_"  # BenchConfig.guardrails is not StudioSettings.guardrails (--server-guardrails)
SUMMARY_COLUMNS = {
    "layout": "layout",
    "variant": "variant",
    "tier": "tier",
    "guard": "guardrails",
    "conc": "concurrency",
    "endpoints": "endpoints",
    "nodes": "nodes",
    "done": "completed",
    "failed": "failed",
    "p50 s": "latency_p50_s",
    "p90 s": "latency_p90_s",
    "p99 s": "latency_p99_s",
    "queue s": "queue_wait_mean_s",
    "infer s": "inference_mean_s",
    "videos/min": "videos_per_min",
    "per device": "videos_per_min_per_device",
    "goodput": "goodput",
    "pareto": "pareto",
}


class BenchCommand(BaseModel):
    """What the terminal's bench adds to the form: where the prompts and variants come from, where the report goes."""

    prompts_file: Path | None = Field(
        default=None,
        description="a file with one prompt per line (default: built-in prompts)",
        json_schema_extra={"flags": ("--prompts",)},
    )
    variants_file: Path | None = Field(
        default=None,
        description='server variants to compare, a TOML (or .json) file of name = "extra serve args", e.g. '
        'teacache = "--cache-backend tea_cache"; each flag is checked against the installed server\'s --help '
        "before any server starts",
        json_schema_extra={"flags": ("--variants",)},
    )
    out: Path = Field(description="report folder: report.json, requests.csv, summary.csv, PNG plots")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "bench",
        help="measure latency and throughput over concurrency, tiers, layouts and server variants",
        description="Latency and throughput per cell (tier x guardrails x concurrency), closed loop or at a "
        "request rate, on each fleet layout (REPLICASxWIDTH) and server variant in turn, on this machine or "
        "placed by Ray (--cluster ray); a report folder, a Pareto plot and a recommendation per tier.",
    )
    add_engine_flags(parser)
    add_group_flags(parser, ClientSettings)
    # The fleet the bench starts when no --layouts are given: --replicas of the engine's width; on this machine or,
    # with --cluster ray, as Ray actors on the nodes of --ray-address (a local Ray on loopback without it).
    add_group_flags(parser, FleetSettings)
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
    if command.variants_file is not None:
        from studio.backend.bench.variants import VariantError, load_variants

        try:
            values["variants"] = load_variants(command.variants_file)
        except VariantError as exc:
            raise BenchConfigError(str(exc)) from None
        if not values["variants"]:
            raise BenchConfigError(f"{command.variants_file} has no variants")
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

        from studio.backend.bench.fleets import bench_cluster, placement_line, plan_bench
        from studio.backend.bench.runner import run_bench
        from studio.backend.bench.variants import VariantError
        from studio.backend.engine_kinds import engine_kind
        from studio.backend.servers.launchers import LaunchError
        from studio.backend.servers.layouts import LayoutError
        from studio.backend.servers.ray_cluster import RayUnavailable
        from studio.backend.servers.supervisor import ServerStartError

    kind = engine_kind(settings)
    if settings.cluster == "ray" and not kind.managed:
        return fail(
            f"--cluster ray places the servers the bench starts (--engine embedded or vllm-omni); the "
            f"{settings.engine} engine's --url servers run already",
            EXIT_USAGE,
        )
    console = Console(stderr=True, soft_wrap=True)
    try:
        # With --cluster ray: one Ray for the whole bench (a local one is shut down at the end, workers and all).
        with bench_cluster(settings):
            fleets = None
            if kind.managed or config.layouts or config.variants:
                try:  # every layout and variant checked before any server starts (--url servers take neither)
                    fleets = plan_bench(settings, config)
                except (LayoutError, VariantError) as exc:
                    return fail(str(exc), EXIT_USAGE)
            report = asyncio.run(run_bench(settings, config, command.out, console=console, fleets=fleets))
    except RayUnavailable as exc:
        return fail(str(exc), EXIT_FAILED)
    except (ServerStartError, LaunchError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return EXIT_FAILED
    columns = {name: key for name, key in SUMMARY_COLUMNS.items() if any(key in row for row in report["cells"])}
    table = Table(title="omni-studio bench")
    for name in columns:
        table.add_column(name, justify="right")
    for row in report["cells"]:
        table.add_row(*(_cell(row.get(key)) for key in columns.values()))
    out = Console(soft_wrap=True, width=None if Console().is_terminal else 200)
    out.print(table)
    for note in report.get("notes", []):  # what the figures cannot say, e.g. a server that reports latency only
        out.print(f"note: {note}")
    for fleet in report.get("fleets", []):
        if fleet.get("error"):
            out.print(f"{fleet['label']}: did not start: {fleet['error']}")
        elif fleet.get("nodes"):
            out.print(f"{fleet['label']}: {placement_line(fleet['nodes'])}")
    plots = "*.png" if "fleets" not in report else "*.png, pareto.png"
    out.print(f"report: {command.out / 'report.json'} (requests.csv, summary.csv, {plots} beside it)")
    out.print("recommendation:")
    for line in report["recommendation"]:
        out.print(f"  {line}")
    return 0
