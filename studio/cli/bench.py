"""`omni-studio bench`: the terminal side of the bench (studio/backend/bench/runner.py): its flags, the run, the summary
table and the recommendation. The bench's own flags are BenchConfig's fields, the form the page uses too; the
fleet's (--replicas, --tp, the engine's) are the studio's settings."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from studio.backend.bench.config import BenchConfig, BenchConfigError, parse_bench_config
from studio.cli.exits import EXIT_FAILED, EXIT_USAGE, fail
from studio.cli.studio_flags import add_engine_flags, add_group_flags, studio_settings
from studio.cli.subcommands import Subcommands
from studio.config import ClientSettings, FleetSettings
from studio.settings_flags import add_model_flags, flag_names, model_values

if TYPE_CHECKING:
    from rich.console import Console

    from studio.backend.bench.fleets import Fleet
    from studio.backend.bench.plan import CapacityPlan

# Prompts and variants come from files here (--prompts FILE, --variants FILE: BenchCommand fields); the rest of
# the form maps one to one.
FROM_FILES = ("prompts", "variants")
CONFIG_FIELDS = tuple(name for name in BenchConfig.model_fields if name not in FROM_FILES)
# What a verification of a plan takes from the command line; the rest (tier, shape, rate, SLO) is the plan's.
VERIFY_FIELDS = ("requests", "seed", "warmup", "layouts")
VERIFY_COLUMNS = (
    "fleet",
    "rate/min",
    "requests",
    "done",
    "within SLO: predicted",
    "measured",
    "p90 s: predicted",
    "measured",
)
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
    # With their 95% intervals (studio.backend.bench.spread): "1.29 (1.10–1.45)".
    "p50 s": "latency_p50_s",
    "p90 s": "latency_p90_s",
    "p99 s": "latency_p99_s",
    "queue s": "queue_wait_mean_s",
    "infer s": "inference_mean_s",
    "videos/min": "videos_per_min",
    "per device": "videos_per_min_per_device",
    # A variant's videos against the baseline's twins (the same prompt and seed): what it costs in fidelity.
    "vs baseline: mean / max levels, PSNR": "vs_baseline",
    "goodput": "goodput",
    # The machine's CPU taken by other work while the cell ran (% of all its cores; report.json has the rest).
    "other CPU %": "other_cpu_percent",
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
    plan_rate: float | None = Field(
        default=None,
        gt=0,
        description="videos per minute: a capacity plan at this rate from the bench's cells, in report.json and as "
        "plan.json and plan.png beside it (needs --slo-seconds; omni-studio plan makes one from any report)",
    )
    verify_plan: Path | None = Field(
        default=None,
        description="a plan.json of omni-studio plan: its recommended fleet (or those of --layouts) run at the "
        "plan's rate, open loop, with the plan's tier, shape, SLO and in-flight slots, --requests requests (default: "
        "the plan's); predicted and measured attainment and p90 side by side, and in report.json",
    )


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


def _verify_config(args: argparse.Namespace, command: BenchCommand) -> tuple[BenchConfig, CapacityPlan]:
    """The bench of a plan's verification: the plan's fleets, rate, tier and shape; --requests, --seed, --warmup
    and --layouts (which of its fleets) from the command line. BenchConfigError or PlanError say what is wrong."""
    from studio.backend.bench.plan import load_plan, verify_config, verify_labels

    given = model_values(args, BenchConfig, CONFIG_FIELDS, dest_prefix=CONFIG_DEST)
    others = [name for name in given if name not in VERIFY_FIELDS]
    if others or command.prompts_file or command.variants_file or command.plan_rate:
        name = (
            others[0] if others else "prompts" if command.prompts_file else "variants" if command.variants_file else ""
        )
        flag = flag_names(name, BenchConfig.model_fields[name])[0] if name else "--plan-rate"
        raise BenchConfigError(
            f"--verify-plan runs the plan's tier, shape, rate and SLO; leave out {flag} (it takes --requests, "
            "--seed, --warmup and --layouts)"
        )
    assert command.verify_plan is not None
    plan = load_plan(command.verify_plan)
    layouts = (
        [str(layout) for layout in parse_bench_config({"layouts": given["layouts"]}).layouts]
        if "layouts" in given
        else None
    )
    values = verify_config(plan, verify_labels(plan, layouts), given.get("requests"), given.get("seed"))
    if "warmup" in given:
        values["warmup"] = given["warmup"]
    return parse_bench_config(values), plan


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "–" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    from studio.backend.bench.plan_model import PlanError

    command = BenchCommand(**model_values(args, BenchCommand))
    plan = None
    try:
        if command.verify_plan is not None:
            config, plan = _verify_config(args, command)
        else:
            config = _config(args, command)
    except (BenchConfigError, PlanError, OSError) as exc:
        return fail(str(exc), EXIT_USAGE)
    if command.plan_rate is not None and config.slo_s is None:
        return fail("--plan-rate plans for a latency objective: give --slo-seconds too", EXIT_USAGE)
    settings = studio_settings(args)
    engine = plan.bench.get("engine") if plan is not None else None
    if engine and settings.engine != engine:
        return fail(f"the plan was made from a bench of the {engine} engine: give --engine {engine}", EXIT_USAGE)

    import asyncio

    from studio.startup import collector_paused

    with collector_paused():
        from rich.console import Console

        from studio.backend.bench.fleets import bench_cluster, plan_bench
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
    if (plan is not None or command.plan_rate is not None) and not kind.managed:
        return fail(
            f"--plan-rate and --verify-plan model the fleets the bench starts; the {settings.engine} engine's --url "
            "servers run already",
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
            if plan is not None and fleets is not None:
                for line in _differences(plan, fleets):
                    console.print(f"note: {line}")
            report = asyncio.run(
                run_bench(
                    settings,
                    config,
                    command.out,
                    console=console,
                    fleets=fleets,
                    plan_rate_per_min=command.plan_rate,
                    verify=plan,
                )
            )
    except RayUnavailable as exc:
        return fail(str(exc), EXIT_FAILED)
    except (ServerStartError, LaunchError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return EXIT_FAILED
    _print_report(report, command.out)
    return 0


def _print_report(report: dict[str, Any], out_dir: Path) -> None:
    """The bench's summary on stdout: a row per cell, the notes, where each fleet ran, fidelity, where the files
    are, then the verification of a plan or the recommendation (and the plan asked for)."""
    from rich.console import Console
    from rich.table import Table

    from studio.backend.bench.fleets import placement_line
    from studio.backend.bench.spread import INTERVAL_COLUMNS, with_interval

    columns = {name: key for name, key in SUMMARY_COLUMNS.items() if any(key in row for row in report["cells"])}
    table = Table(title="omni-studio bench")
    for name, key in columns.items():
        table.add_column(name, justify="right", no_wrap=key in INTERVAL_COLUMNS)  # a figure and its interval: one line

    def shown(row: dict[str, Any], key: str) -> str:
        if key in INTERVAL_COLUMNS:
            return _cell(with_interval(row, key, 1 if key == "videos_per_min" else 2))
        if key == "other_cpu_percent" and row.get(key) is not None:
            return f"{row[key]:.0f}"
        return _cell(row.get(key))

    for row in report["cells"]:
        table.add_row(*(shown(row, key) for key in columns.values()))
    # Not at a terminal (a file, a pipe): as wide as the table itself, so that no header or figure wraps, however
    # wide the intervals make it.
    probe = Console(width=100_000)
    out = Console(soft_wrap=True, width=None if probe.is_terminal else probe.measure(table).maximum)
    out.print(table)
    for note in report.get("notes", []):  # what the figures cannot say, e.g. a server that reports latency only
        out.print(f"note: {note}")
    for fleet in report.get("fleets", []):
        if fleet.get("error"):
            out.print(f"{fleet['label']}: did not start: {fleet['error']}")
        elif fleet.get("nodes"):
            out.print(f"{fleet['label']}: {placement_line(fleet['nodes'])}")
    if "fidelity" in report:
        out.print(
            f"fidelity (each variant's videos vs {report['fidelity']['baseline']}'s of the same prompt and seed):"
        )
        for line in report["fidelity"]["summary"]:
            out.print(f"  {line}")
    plots = "*.png" if "fleets" not in report else "*.png, pareto.png"
    out.print(f"report: {out_dir / 'report.json'} (requests.csv, summary.csv, {plots} beside it)")
    if "verify" in report:
        _print_verification(out, report["verify"])
        return
    out.print("recommendation:")
    for line in report["recommendation"]:
        out.print(f"  {line}")
    if "plan" in report:
        _print_plan(out, report["plan"])


def _differences(plan: CapacityPlan, fleets: list[Fleet]) -> list[str]:
    """Where a fleet of the verification is not started as the bench the plan came from started it."""
    lines = []
    for fleet in fleets:
        model = plan.model(fleet.label)
        threads = fleet.describe()["engine_threads"]
        if model is not None and model.engine_threads and threads != model.engine_threads:
            lines.append(
                f"{fleet.label}: engine threads {threads} here, {model.engine_threads} in the plan's bench "
                "(--engine-threads): the figures may not compare"
            )
    return lines


def _print_verification(out: Console, verification: dict) -> None:
    from rich.table import Table

    from studio.backend.bench.plan import PlanVerification, check_lines

    checked = PlanVerification.model_validate(verification)
    table = Table(title="omni-studio bench --verify-plan: predicted and measured")
    for name in VERIFY_COLUMNS:
        table.add_column(name, justify="right")
    for c in checked.checks:
        table.add_row(
            c.label,
            f"{c.rate_per_min:g}",
            str(c.requests),
            str(c.completed),
            f"{c.predicted_attainment * 100:.1f}%",
            f"{c.measured_attainment * 100:.1f}%",
            f"{c.predicted_p90_s:.2f}",
            _cell(c.measured_p90_s),
        )
    out.print(table)
    for line in check_lines(checked):
        out.print(line)
    out.print(
        "predicted: for this run's arrivals from an empty fleet (in brackets, what 8 of 10 such runs show); the "
        "plan's own figure is the steady state"
    )


def _print_plan(out: Console, plan: dict) -> None:
    from studio.backend.bench.plan import CapacityPlan, plan_lines

    if "error" in plan:
        out.print(f"plan: none: {plan['error']}")
        return
    out.print("plan:")
    for line in plan_lines(CapacityPlan.model_validate(plan)):
        out.print(f"  {line}")
