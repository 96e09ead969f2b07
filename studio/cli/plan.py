"""`omni-studio plan`: a capacity plan from a bench report (studio/backend/bench/plan.py): for a rate of videos per
minute and a latency objective, each fleet's predicted p50, p90 and share of requests on time, the fleet to run,
the largest rate each sustains, and the GPUs the rate needs; plan.json and plan.png."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import BaseModel, Field

from studio.backend.bench.plan_inputs import PlanInputs
from studio.cli.exits import EXIT_USAGE, fail
from studio.cli.subcommands import Subcommands
from studio.settings_flags import add_model_flags, flag_names, model_values

TABLE_COLUMNS = ("fleet", "devices", "p50 s", "p90 s", "within SLO", "most videos/min")


class PlanCommand(BaseModel):
    """Where the plan reads the bench from and writes to."""

    report: Path = Field(
        description="the report.json of an omni-studio bench (with --layouts, or --replicas)",
        json_schema_extra={"flags": ("--from",)},
    )
    out: Path | None = Field(default=None, description="folder for plan.json and plan.png (default: the report's)")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "plan",
        help="plan a fleet from a bench report: for a rate and a latency objective, the layout and GPUs it takes",
        description="For Poisson arrivals at --rate videos per minute, each fleet of the report simulated as the "
        "studio drives it (fitted to the bench's cells): p50, p90 and the share of requests within --slo-seconds; "
        "the fleet of fewest GPUs that keeps --attainment of them on time, the largest rate each fleet sustains, "
        "and the GPUs the rate needs. Writes plan.json and plan.png; `omni-studio bench --verify-plan plan.json` "
        "checks it against a run.",
    )
    group = parser.add_argument_group("plan")
    add_model_flags(group, PlanCommand)
    add_model_flags(group, PlanInputs)


def _flag(name: str) -> str:
    """A field of the plan's inputs as its flag: a problem with it is said in the command line's words."""
    return flag_names(name, PlanInputs.model_fields[name])[0]


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from studio.backend.bench.plan import PlanError, devices_text, make_plan, plan_lines, read_report
    from studio.backend.bench.plan_plot import write_plan
    from studio.backend.runs.problems import describe, field_bounds

    command = PlanCommand(**model_values(args, PlanCommand))
    try:
        inputs = PlanInputs(**model_values(args, PlanInputs))
    except ValidationError as exc:
        return fail(describe(exc, _flag, lambda name: field_bounds(PlanInputs, name)), EXIT_USAGE)
    try:
        report = read_report(command.report)
        plan = make_plan(report, inputs, source=str(command.report))
    except PlanError as exc:
        return fail(str(exc), EXIT_USAGE)
    path, plot = write_plan(plan, command.out or command.report.parent)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"omni-studio plan: {plan.tier} at {inputs.rate_per_min:g} videos/min")
    for name in TABLE_COLUMNS:
        table.add_column(name, justify="right")
    for f in plan.forecasts:
        table.add_row(
            f.label + ("" if f.fits else " (does not fit)"),
            devices_text(f.devices, f.device_kind),
            f"{f.p50_s:.2f}",
            f"{f.p90_s:.2f}",
            f"{f.attainment * 100:.1f}%",
            f"{f.max_rate_per_min:.1f}",
        )
    out = Console(soft_wrap=True, width=None if Console().is_terminal else 200)
    out.print(table)
    for line in plan_lines(plan)[1:]:
        out.print(line)
    out.print("assumptions:")
    for line in plan.assumptions:
        out.print(f"  {line}")
    out.print(f"plan: {path} (and {plot.name} beside it); check it with: omni-studio bench --verify-plan {path}")
    return 0
