"""The page's Bench view: the cells of `omni-studio bench` (tier x guardrails x concurrency), run by the same
engine (studio.backend.bench.runner) with progress while it runs and the report, table, recommendation and plots at the
end. Without layouts or variants the cells run on the studio's own endpoints (bench_pool); with them, on each
fleet (layout x variant) in turn (bench_fleets), the studio's own servers stopped meanwhile (the fleets need
their GPUs) and started again after; one of the fleets can then be applied to the studio. The fleets run where
the studio's own do: on this machine, or on Ray with --cluster ray. The form is checked
by the bench's own model (bench_config.py), as the CLI's flags are. Each cell's p50, p90 and videos/min are shown
with their 95% intervals, and the machine's load while it ran. The last finished bench's view is kept, and shown
again when the page opens (last_bench). After a bench, a capacity plan from its report (plan_view: what
`omni-studio plan` makes). No gradio here: bench_tab.py lays it out.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from studio.backend.face import (
    BASELINE_VARIANT,
    PARETO_PLOT,
    BenchConfig,
    BenchConfigError,
    CapacityPlan,
    LayoutError,
    PlanError,
    PlanInputs,
    RayUnavailable,
    StudioController,
    VariantError,
    bench_fleets,
    bench_pool,
    cell_grid,
    describe,
    devices_text,
    field_bounds,
    make_plan,
    parse_bench_config,
    plan_bench,
    plan_lines,
    read_report,
    write_plan,
)
from studio.ui.engine_status import engine_summary

PLOT_FILES = ("latency_vs_concurrency.png", "throughput_vs_concurrency.png", "request_timeline.png", PARETO_PLOT)
# Report keys shown in the cells table, under the column names the table gives them (those the report has).
SUMMARY_COLUMNS = {
    "layout": "layout",
    "variant": "variant",
    "tier": "tier",
    "guardrails": "guardrails",
    "concurrency": "concurrency",
    "endpoints": "endpoints",
    "nodes": "nodes",
    "completed": "completed",
    "failed": "failed",
    "latency_p50_s": "p50 s (95% interval)",
    "latency_p90_s": "p90 s (95% interval)",
    "latency_p99_s": "p99 s",
    "latency_max_s": "max s",
    "queue_wait_mean_s": "queue wait s (at least)",
    "inference_mean_s": "inference s (at most)",
    "videos_per_min": "videos/min (95% interval)",
    "videos_per_min_per_device": "videos/min per device",
    # A variant's videos against the baseline's twins (the same prompt and seed), beside its speed.
    "vs_baseline": "vs baseline: mean / max levels, PSNR",
    "goodput": "goodput",
    # The machine's CPU while the cell ran (% of all its cores), and the part of it not the studio's nor its servers'.
    # With the part of it that was other work than the bench's, "62 (3)": one column, narrow enough for 1024 px.
    "cpu_percent": "machine CPU % (other work)",
    "pareto": "Pareto set",
}
# The figures shown with their interval: the report's columns of its ends (studio.backend.bench.spread).
WITH_INTERVAL = {
    "latency_p50_s": ("latency_p50_low_s", "latency_p50_high_s", 2),
    "latency_p90_s": ("latency_p90_low_s", "latency_p90_high_s", 2),
    "videos_per_min": ("videos_per_min_low", "videos_per_min_high", 1),
}
# Shown until a bench has run: the columns of a bench on the studio's own servers.
FLEET_ONLY = ("layout", "variant", "nodes", "videos_per_min_per_device", "vs_baseline", "pareto")


@dataclass(frozen=True)
class BenchUpdate:
    """What the Bench tab shows, while the bench runs and once at the end."""

    status: str
    summary: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            columns=[name for key, name in SUMMARY_COLUMNS.items() if key not in FLEET_ONLY]
        )
    )
    recommendation: str = ""
    plots: list[str] = field(default_factory=list)  # the PNGs the bench wrote
    report: str | None = None  # report.json
    # The fleets that ran, by label (the report's records), and the one recommended for the first tier.
    fleets: dict[str, dict[str, Any]] = field(default_factory=dict)
    recommended: str | None = None


def _text(value: str) -> str:
    """Text shown in Markdown: markup escaped, quotes kept readable."""
    return html.escape(value, quote=False)


_busy: set[int] = set()  # ids of controllers running a bench now
_benched: dict[int, dict[str, dict[str, Any]]] = {}  # the fleets of each controller's last layout bench, by label
_reports: dict[int, Path] = {}  # the report.json of each controller's last bench: what a plan reads
_last: dict[int, BenchUpdate] = {}  # each controller's last finished bench, as the tab showed it


NO_SLO = "no SLO set: goodput is the share within it"


def with_interval(cell: dict[str, Any], key: str) -> Any:
    """A cell's figure with its 95% interval, "1.29 (1.10–1.45)"; as it is where it has none."""
    point = cell.get(key)
    low_key, high_key, digits = WITH_INTERVAL[key]
    low, high = cell.get(low_key), cell.get(high_key)
    if point is None or low is None or high is None:
        return point
    return f"{point:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def _tells(key: str, cells: list[dict[str, Any]]) -> bool:
    """Whether a fleet's column says something the others do not: a variant other than the one baseline, or
    videos/min per device where a cell ran on several devices (on one, it repeats videos/min). A table narrow
    enough for a 1024 px window keeps only those."""
    if not any(key in cell for cell in cells):
        return False
    if key == "variant":
        return {cell.get("variant") for cell in cells} != {BASELINE_VARIANT}
    if key == "videos_per_min_per_device":
        return any(cell.get(key) != cell.get("videos_per_min") for cell in cells)
    return True


def _cpu(cell: dict[str, Any]) -> Any:
    """The machine's CPU while the cell ran, with the part that was other work: "62 (3)"."""
    total, other = cell.get("cpu_percent"), cell.get("other_cpu_percent")
    if total is None:
        return None
    return f"{total:.0f}" if other is None else f"{total:.0f} ({other:.0f})"


def summary_table(report: dict[str, Any]) -> pd.DataFrame:
    cells = [
        {**cell, **{key: with_interval(cell, key) for key in WITH_INTERVAL}, "cpu_percent": _cpu(cell)}
        for cell in report["cells"]
    ]
    keys = [key for key in SUMMARY_COLUMNS if key not in FLEET_ONLY or _tells(key, report["cells"])]
    if "layout" in keys:
        keys.remove("endpoints")  # a layout names its replicas: 2x1 is two endpoints
    table = pd.DataFrame(cells, columns=keys).rename(columns=SUMMARY_COLUMNS)
    table["guardrails"] = table["guardrails"].map({True: "on", False: "off"})
    if "Pareto set" in table:
        table["Pareto set"] = table["Pareto set"].map({True: "yes", False: ""})
    table = table.round(2)
    if table["goodput"].isna().all():
        table["goodput"] = NO_SLO  # a blank column would look like a failure to measure
    return table


def _refused(reason: str) -> BenchUpdate:
    return BenchUpdate(f"**bench not started**: {_text(reason)}")


async def run_bench_view(controller: StudioController, form: Mapping[str, Any]) -> AsyncIterator[BenchUpdate]:
    """Progress while the bench runs, then its results. `form`: the bench model's field names and values.
    One bench at a time per studio; generation from the Generate view at the same time skews it."""
    try:
        config = parse_bench_config(form)
    except BenchConfigError as exc:
        yield _refused(str(exc))
        return
    if id(controller) in _busy:
        yield _refused("a bench is already running in this studio")
        return
    _busy.add(id(controller))
    try:
        if config.layouts or config.variants:
            async for update in _fleet_bench(controller, config):
                yield update
        else:
            async for update in _studio_bench(controller, config):
                yield update
    finally:
        _busy.discard(id(controller))


def _out(controller: StudioController) -> Path:
    return _bench_root(controller) / time.strftime("%Y%m%d_%H%M%S")


async def _progress(task: asyncio.Task, cells: int, progress: dict[str, tuple[int, int]], stage: list[str]):
    """A status line a second while the bench runs."""
    started = time.monotonic()
    while not task.done():
        await asyncio.wait({task}, timeout=1.0)
        if progress:
            label, (done, total) = list(progress.items())[-1]
            status = f"running cell {len(progress)} of {cells}: {_text(label)}: {done}/{total} requests done"
        else:
            status = "starting ..."
        if stage:
            status = f"{_text(stage[-1])} · {status}" if progress else _text(stage[-1])
        yield BenchUpdate(f"{status} · {time.monotonic() - started:.0f} s")


def _results(report: dict[str, Any], out: Path, took_s: float, cells: int, note: str = "") -> BenchUpdate:
    fleets = {record["label"]: record for record in report.get("fleets", []) if not record.get("error")}
    chosen = next(iter(report.get("recommendations", [])), {})
    recommended = f"{chosen['layout']} {chosen['variant']}" if chosen.get("layout") else None
    lines = [f"- {_text(line)}" for line in report["recommendation"]]
    if "fidelity" in report:
        lines.append(f"- fidelity, each variant's videos vs {_text(report['fidelity']['baseline'])}'s twins:")
        lines += [f"  - {_text(line)}" for line in report["fidelity"]["summary"]]
    lines += [
        f"- {_text(record['label'])} did not start: {_text(record['error'])}"
        for record in report.get("fleets", [])
        if record.get("error")
    ]
    return BenchUpdate(
        status=f"done in {took_s:.0f} s: {cells} cell(s); report in `{_text(str(out))}`{note}",
        summary=summary_table(report),
        recommendation="\n".join(lines),
        plots=[str(out / name) for name in PLOT_FILES if (out / name).is_file()],
        report=str(out / "report.json"),
        fleets=fleets,
        recommended=recommended if recommended in fleets else next(iter(fleets), None),
    )


async def _studio_bench(controller: StudioController, config: BenchConfig) -> AsyncIterator[BenchUpdate]:
    """The cells on the studio's own endpoints, as they serve."""
    if controller.starting:
        yield BenchUpdate("waiting for the engine to be ready ...")
        await controller.wait_until_ready()
    if not controller.ready() or controller.fleet.pool is None:
        yield _refused(engine_summary(controller))
        return
    out = _out(controller)
    cells = len(cell_grid(config))
    progress: dict[str, tuple[int, int]] = {}

    def on_progress(label: str, done: int, total: int) -> None:
        progress[label] = (done, total)

    started = time.monotonic()
    task = asyncio.create_task(
        bench_pool(
            controller.fleet.pool,
            controller.store,
            controller.settings,
            config,
            out,
            on_progress,
            manager=controller.fleet if controller.managed else None,
        )
    )
    async for update in _progress(task, cells, progress, []):
        yield update
    try:
        report = task.result()
    except Exception as exc:  # shown in the page; nothing of the bench's finished requests is lost (history)
        yield BenchUpdate(f"**bench failed**: {_text(f'{type(exc).__name__}: {exc}')}")
        return
    yield _finished(controller, _results(report, out, time.monotonic() - started, cells))


def _release(controller: StudioController) -> None:
    """The studio's servers stopped for the bench. On Ray their actors go too (a new fleet of them is made at the
    next start): a stopped replica's actor still holds the GPUs and CPUs the bench's fleets need."""
    if controller.settings.cluster == "ray":
        controller.apply_settings(controller.settings)
    else:
        controller.stop()


async def _fleet_bench(controller: StudioController, config: BenchConfig) -> AsyncIterator[BenchUpdate]:
    """Each fleet in turn, the studio's own servers stopped meanwhile and started again after. With the studio on
    Ray (--cluster ray) the fleets run on its Ray too, joined by the plan where the studio has not yet: the
    studio's fleet comes back on it after the bench, so the bench leaves it as it is."""
    if not controller.managed:
        yield _refused("layouts and variants are fleets the bench starts; this studio attaches to remote servers")
        return
    yield BenchUpdate("checking the layouts and variants ...")
    try:  # a variant's flags are read from the installed server's help: seconds for vLLM
        fleets = await asyncio.to_thread(plan_bench, controller.settings, config)
    except (LayoutError, VariantError, RayUnavailable) as exc:
        yield _refused(str(exc))
        return
    out = _out(controller)
    cells = len(cell_grid(config)) * len(fleets)
    progress: dict[str, tuple[int, int]] = {}
    stage: list[str] = []

    def on_progress(label: str, done: int, total: int) -> None:
        progress[label] = (done, total)

    yield BenchUpdate("stopping the studio's servers: the fleets need their GPUs ...")
    await asyncio.to_thread(_release, controller)
    started = time.monotonic()
    task = asyncio.create_task(
        bench_fleets(fleets, controller.store, controller.settings, config, out, on_progress, stage.append)
    )
    try:
        async for update in _progress(task, cells, progress, stage):
            yield update
    finally:
        if not task.done():  # the page went away: the fleet running now stops before the studio starts again
            task.cancel()
            await asyncio.wait({task})
        controller.start_in_background()  # the studio serves again as it was, until a fleet is applied
    try:
        report = task.result()
    except Exception as exc:  # shown in the page; nothing of the bench's finished requests is lost (history)
        yield BenchUpdate(f"**bench failed**: {_text(f'{type(exc).__name__}: {exc}')}")
        return
    note = "; the studio's servers start again as they were"
    yield _finished(controller, _results(report, out, time.monotonic() - started, cells, note))


def _finished(controller: StudioController, update: BenchUpdate) -> BenchUpdate:
    """A bench's results, kept as this studio's last: what a plan reads, the fleets it may apply, and the view the
    tab shows again when the page opens."""
    assert update.report is not None
    _benched[id(controller)] = update.fleets
    _reports[id(controller)] = Path(update.report)
    _last[id(controller)] = update
    return update


def _bench_root(controller: StudioController) -> Path:
    return Path(controller.store.root) / "bench"


def last_bench(controller: StudioController) -> BenchUpdate | None:
    """The last finished bench of this studio, as its tab showed it at the end: kept since it finished, else (a
    studio started again) read back from the newest report of the page's benches. None where there is none."""
    kept = _last.get(id(controller))
    if kept is not None:
        return kept
    root = _bench_root(controller)
    reports = sorted(root.glob("*/report.json")) if root.is_dir() else []
    for path in reversed(reports):  # the folders are named by their start: the newest last
        try:
            report = read_report(path)
            environment = report.get("environment") or {}
            took_s = float(environment.get("finished", 0)) - float(environment.get("started", 0))
            cells = len(report.get("cells") or [])
            return _finished(controller, _results(report, path.parent, max(0.0, took_s), cells))
        except (PlanError, KeyError, TypeError, ValueError):
            continue  # not a report this view can show: an older one may be
    return None


def benched_fleet(controller: StudioController, label: str | None) -> dict[str, Any] | None:
    """A fleet of this studio's last layout bench, by its label ("2x1 base"), or None."""
    return _benched.get(id(controller), {}).get(label or "")


def apply_question(fleet: Mapping[str, Any]) -> str:
    """What the confirmation says before a fleet is applied."""
    return (
        f"Restart the studio's servers as **{_text(fleet['label'])}**: {fleet['replicas']} replica(s), width "
        f"{fleet['width']}, extra serve args `{_text(fleet['serve_args'] or 'none')}`? Requests running on "
        "the servers now fail; those waiting are sent when the new servers are ready."
    )


def apply_fleet(controller: StudioController, fleet: Mapping[str, Any]) -> str:
    """The studio's servers as this fleet of a bench: its replicas, width and serve args, started in the
    background (the page follows it in the Server view)."""
    if id(controller) in _busy:
        return "not applied: a bench is running in this studio"
    settings = controller.settings.model_copy(
        update={
            "replicas": fleet["replicas"],
            "tensor_parallel_size": fleet["width"],
            "extra_serve_args": fleet["serve_args"],
        }
    )
    controller.apply_settings(settings)
    controller.start_in_background()
    return f"applied {_text(fleet['label'])}: the studio's servers are starting (the Server view follows them)"


# ---- a capacity plan from the last bench -------------------------------------------------------------------------

# The plan form's fields, as the page labels them.
PLAN_LABELS = {"rate_per_min": "Rate", "slo_s": "SLO", "attainment": "Within SLO", "gpus": "GPUs"}


@dataclass(frozen=True)
class PlanUpdate:
    """What the Bench tab's Plan shows."""

    text: str
    plot: str | None = None  # plan.png
    plan: str | None = None  # plan.json


def plan_markdown(plan: CapacityPlan) -> str:
    """The plan as the page shows it: the recommendation, a row per fleet, the capacity and the assumptions."""
    head, *rest = plan_lines(plan)
    rows = [
        "| fleet | devices | p50 s | p90 s | within SLO | most videos/min |",
        "|---|---|---|---|---|---|",
        *(
            f"| {_text(f.label)}{'' if f.fits else ' (does not fit)'} | {devices_text(f.devices, f.device_kind)} "
            f"| {f.p50_s:.2f} | {f.p90_s:.2f} | {f.attainment * 100:.1f}% | {f.max_rate_per_min:.1f} |"
            for f in plan.forecasts
        ),
    ]
    return "\n".join(
        [
            f"**{_text(head)}**",
            "",
            *(f"- {_text(line.strip())}" for line in rest),
            "",
            *rows,
            "",
            "Assumptions:",
            "",
            *(f"- {_text(line)}" for line in plan.assumptions),
        ]
    )


def _plan(report_path: Path, inputs: PlanInputs) -> tuple[CapacityPlan, Path, Path]:
    plan = make_plan(read_report(report_path), inputs, source=str(report_path))
    path, plot = write_plan(plan, report_path.parent)
    return plan, path, plot


def _refused_plan(report_path: Path) -> str | None:
    """Why the plan cannot model the last bench, in the page's words (the plan's own reasons name the command
    line's flags); None where it can try."""
    try:
        report = read_report(report_path)
    except PlanError as exc:
        return str(exc)
    if "fleets" not in report:
        return (
            "the plan models fleets the studio starts; the last bench measured servers that run elsewhere (this "
            "studio attaches to them)"
        )
    if (report.get("config") or {}).get("request_rate"):
        return (
            "the plan models closed-loop cells; this report's cells ran at a request rate: bench again with the "
            "request rate at 0"
        )
    return None


async def plan_view(controller: StudioController, form: Mapping[str, Any]) -> PlanUpdate:
    """A capacity plan from this studio's last bench: `form` has the rate (videos/min), the SLO (s), the share
    within it (%) and the GPUs (0: every fleet that fits this machine). plan.json and plan.png go beside the
    bench's report."""
    report_path = _reports.get(id(controller))  # the page's load reads a studio's earlier one back (last_bench)
    if report_path is None:
        return PlanUpdate(
            "**no plan**: run a bench with layouts first (or one of the studio's servers as they are): the plan "
            "models the fleets it measured"
        )
    attainment = form.get("attainment")
    if attainment is not None and not 0 < attainment < 100:
        return PlanUpdate(f"**no plan**: Within SLO must be more than 0 and less than 100 (%), got {attainment:g}")
    values = {
        "rate_per_min": form.get("rate_per_min"),
        "slo_s": form.get("slo_s"),
        "attainment": None if attainment is None else attainment / 100,
        "gpus": int(form["gpus"]) if form.get("gpus") else None,
    }
    try:
        inputs = PlanInputs(**{key: value for key, value in values.items() if value is not None})
    except ValidationError as exc:
        reason = describe(exc, lambda name: PLAN_LABELS.get(name, name), lambda name: field_bounds(PlanInputs, name))
        return PlanUpdate(f"**no plan**: {_text(reason)}")
    refused = _refused_plan(report_path)
    if refused is not None:
        return PlanUpdate(f"**no plan**: {_text(refused)}")
    try:  # seconds of simulation: off the page's event loop
        plan, path, plot = await asyncio.to_thread(_plan, report_path, inputs)
    except PlanError as exc:
        return PlanUpdate(f"**no plan**: {_text(str(exc))}")
    return PlanUpdate(plan_markdown(plan), str(plot), str(path))
