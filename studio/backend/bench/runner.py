"""The bench: the same run engine as the page, over a grid of cells (`omni-studio bench` and the page's Bench view).

A cell is one (tier, guardrails, concurrency) setting. Each cell sends its warm-up requests (not counted),
then its measured requests: closed loop (at most `concurrency` in flight) or open loop (Poisson arrivals at
`request_rate`). The cells run on the endpoints given (bench_pool: the page's servers, --url servers) or on
each fleet (layout x variant, bench_fleets.py) in turn: start it, warm every replica, measure, stop it.
Results: report.json, requests.csv, summary.csv and PNG plots in the output folder, and a recommendation per
tier (for fleets: the Pareto set and the fleet to run, pareto.py). Each cell has the 95% intervals of its p50, p90
and videos/min (spread.py) and the machine's load while it ran (load.py); a recommendation whose winner is not
clearly ahead of its runner-up says so (doubt.py). Where fleets run several variants, each
variant's videos are compared with the baseline's twins (`fidelity`, and a column per cell: variant_fidelity.py).
The form is studio/backend/bench/config.py.
Asked for it, the report of a fleet bench also carries a capacity plan from its cells (`plan`: plan.py), or a plan
set beside the run that verified it (`verify`: plan.check_plan).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from studio.backend.bench import plots
from studio.backend.bench.cells import CellResult
from studio.backend.bench.config import BenchConfig
from studio.backend.bench.doubt import doubt
from studio.backend.bench.fleets import (
    Fleet,
    bench_cluster,
    cluster_line,
    cluster_record,
    placement,
    placement_line,
    plan_bench,
    running_fleet,
    start_fleet,
)
from studio.backend.bench.load import LoadSampler
from studio.backend.bench.pareto import Recommendation, cell_name, fronts, recommend
from studio.backend.bench.pareto_plot import pareto_figure
from studio.backend.bench.plan import CapacityPlan, PlanError, check_plan, make_plan
from studio.backend.bench.plan_inputs import PlanInputs
from studio.backend.bench.plan_plot import write_plan
from studio.backend.bench.spread import cell_spread, spread_record
from studio.backend.bench.variant_fidelity import baseline_of, compare_variants
from studio.backend.clients.router import EndpointPool
from studio.backend.engine_kinds import engine_kind
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.spec import MAX_CONCURRENCY, RunSpec
from studio.backend.runs.stats import RequestSample, summarize
from studio.backend.runs.store import OutputStore
from studio.backend.servers.fleet_manager import FleetManager
from studio.backend.servers.launchers import LaunchError
from studio.backend.servers.metrics import scrape
from studio.backend.servers.supervisor import ServerStartError
from studio.backend.servers.warmup import wait_until_warm
from studio.config import StudioSettings
from studio.csv_cells import write_csv_rows

PARETO_PLOT = "pareto.png"


def arrived(view: RequestView, closed_loop: bool) -> RequestSample:
    """A request's figures from its arrival. At a request rate it arrives when it is submitted, and its wait in the
    studio (for a slot) is part of its latency. In a closed loop the bench holds each request back until one in
    flight ends, as a closed-loop client would not yet have made it: it arrives when it is sent, as vLLM-Omni's
    benchmark counts its latency."""
    if not closed_loop or view.timings.sent is None:
        return view.sample()
    timings = dataclasses.replace(view.timings, created=view.timings.sent)
    return RequestSample.of(str(view.state), view.tier, timings, view.finished_at)


def poisson_arrivals(count: int, rate: float, rng: random.Random) -> list[float]:
    """Arrival offsets (s) of a Poisson process: exponential gaps with mean 1/rate."""
    now, offsets = 0.0, []
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def cell_spec(
    config: BenchConfig, tier: str, guardrails: bool, settings: StudioSettings, prompts: list[str], concurrency: int
) -> RunSpec:
    """The run of a cell (or of its warm-up): what the form leaves empty takes the engine's defaults, as the page's
    and `generate`'s runs do (RunSpec.resolved). Seeds count up from the config's, so that a bench is repeatable and
    every fleet of it gets the same requests: a variant's videos have twins in the baseline's to compare with."""
    spec = RunSpec(
        prompts=prompts,
        concurrency=concurrency,
        tier=tier,
        aspect=config.aspect,
        frames=config.frames,
        steps=config.steps,
        seed=config.seed,
        seed_policy="increment",
        guardrails=guardrails,
        bench=True,  # History keeps the bench's cells and warm-ups apart from people's runs
    )
    return spec.resolved(engine_kind(settings), settings)


async def warm_fleet(
    pool: EndpointPool, store: OutputStore, config: BenchConfig, settings: StudioSettings, replicas: int
) -> None:
    """Every replica answers `warmup` requests of each tier before any cell: the router gives each of K requests
    sent at once to a different replica (the least busy), so none meets its first request in a measured cell.
    First each server's own warm-up (the embedded engine's larger batch sizes) ends: a cell must not meet it."""
    await wait_until_warm([endpoint.url for endpoint in pool.endpoints], settings.init_timeout_s)
    if not config.warmup:
        return
    count = config.warmup * replicas
    for tier in config.tiers:
        prompts = [config.prompts[i % len(config.prompts)] for i in range(count)]
        spec = cell_spec(config, tier, config.guardrails[0], settings, prompts, min(MAX_CONCURRENCY, replicas))
        await Run(spec, pool, store, request_timeout_s=settings.request_timeout_s).wait()


async def run_cell(
    pool: EndpointPool,
    store: OutputStore,
    config: BenchConfig,
    tier: str,
    guardrails: bool,
    concurrency: int,
    settings: StudioSettings,
    on_done: Callable[[], None],
    fleet: Fleet | None = None,
) -> CellResult:
    rng = random.Random(f"{config.seed}-{tier}-{guardrails}-{concurrency}")
    prompts = [config.prompts[i % len(config.prompts)] for i in range(config.requests)]
    if config.warmup:
        warm = Run(
            cell_spec(config, tier, guardrails, settings, prompts[: config.warmup], concurrency),
            pool,
            store,
            request_timeout_s=settings.request_timeout_s,
        )
        await warm.wait()
    arrivals = poisson_arrivals(len(prompts), config.request_rate, rng) if config.request_rate else None
    cap = concurrency
    if config.request_rate:  # open loop: no cap but the studio's slots, where they are asked for
        slots = config.slots_per_server
        cap = MAX_CONCURRENCY if slots is None else min(MAX_CONCURRENCY, slots * len(pool.endpoints))
    run = Run(
        cell_spec(config, tier, guardrails, settings, prompts, cap),
        pool,
        store,
        request_timeout_s=settings.request_timeout_s,
        arrivals=arrivals,
    )
    samples: list[dict[str, Any]] = []

    async def sample_metrics() -> None:
        while True:
            for metrics in await asyncio.gather(*(scrape(ep.url) for ep in pool.endpoints)):
                if metrics.error is None:
                    samples.append(
                        {"url": metrics.url, "t": time.time(), "running": metrics.running, "waiting": metrics.waiting}
                    )
            await asyncio.sleep(1.0)

    sampler = asyncio.create_task(sample_metrics())
    load = LoadSampler().start()
    try:
        async for view in run.updates():
            if view.state.finished:
                on_done()
    finally:
        sampler.cancel()
        machine = await asyncio.to_thread(load.stop)
    closed_loop = not config.request_rate
    requests = [arrived(v, closed_loop) for v in run.views]
    summary = summarize(requests, slo_s=config.slo_s, by_tier=False)
    cell = CellResult(tier, guardrails, concurrency, len(pool.endpoints), summary, run.views, samples, fleet)
    cell.spread, cell.load = cell_spread(requests), machine
    return cell


def _uncertain(chosen: CellResult, others: list[CellResult], figure: str, lower: bool) -> str:
    """ "; uncertain: why" where the chosen cell is not clearly ahead of the next one by `figure`, else ""."""
    ranked = sorted(
        (c for c in others if c is not chosen and c.row().get(figure) is not None),
        key=lambda c: c.row()[figure] if lower else -c.row()[figure],
    )
    if not ranked:
        return ""
    nearest = ranked[0]
    names = (f"concurrency {chosen.concurrency}", f"concurrency {nearest.concurrency}")
    reason = doubt(chosen.row(), nearest.row(), figure, names)
    return f"; uncertain: {reason}" if reason else ""


def recommendation(cells: list[CellResult], slo_s: float | None) -> list[str]:
    """For the endpoints the bench was given: the concurrency of lowest latency, and of most videos within the SLO;
    each says where it is uncertain (doubt.py)."""
    lines = []
    for tier in sorted({c.tier for c in cells}):
        mine = [c for c in cells if c.tier == tier and c.summary.completed]
        if not mine:
            lines.append(f"{tier}: no completed requests")
            continue
        fastest = min(mine, key=lambda c: c.summary.latency_p50_s or float("inf"))
        within = [c for c in mine if slo_s is None or (c.summary.latency_p90_s or float("inf")) <= slo_s]
        line = (
            f"{tier}: lowest latency at concurrency {fastest.concurrency} x {fastest.endpoints} endpoint(s) "
            f"(p50 {fastest.summary.latency_p50_s:.2f} s{_uncertain(fastest, mine, 'latency_p50_s', lower=True)})"
        )
        if within:
            best = max(within, key=lambda c: c.summary.throughput_per_min or 0)
            slo = f"p90 within {slo_s:g} s" if slo_s is not None else "no SLO given"
            line += (
                f"; highest throughput with {slo} at concurrency {best.concurrency} x {best.endpoints} "
                f"endpoint(s): {best.summary.throughput_per_min or 0:.2f} videos/min "
                f"(p90 {best.summary.latency_p90_s:.2f} s{_uncertain(best, within, 'videos_per_min', lower=False)})"
            )
        else:
            line += f"; no setting keeps p90 within {slo_s:g} s: add replicas or lower the tier"
        lines.append(line)
    return lines


def request_rows(cells: list[CellResult]) -> list[dict[str, Any]]:
    rows = []
    for cell in cells:
        fleet = {"layout": str(cell.fleet.layout), "variant": cell.fleet.variant.name} if cell.fleet else {}
        for view in cell.views:
            rows.append(
                {
                    **fleet,
                    "tier": cell.tier,
                    "guardrails": cell.guardrails,
                    "concurrency": cell.concurrency,
                    "endpoints": cell.endpoints,
                    **view.as_record(),
                }
            )
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        path.write_text("")
        return
    names = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as handle:
        write_csv_rows(handle, names, rows)  # a prompt such as =HYPERLINK(...) is text, not a formula


def write_plots(out: Path, cells: list[CellResult]) -> list[Path]:
    series_latency: dict[str, list[tuple[float, float]]] = {}
    series_throughput: dict[str, list[tuple[float, float]]] = {}
    for cell in cells:
        where = cell.fleet.label if cell.fleet else f"x{cell.endpoints}"
        name = f"{cell.tier}{'' if cell.guardrails else ' no-guard'} {where}"
        if cell.summary.latency_p50_s is not None:
            series_latency.setdefault(name + " p50", []).append((cell.concurrency, cell.summary.latency_p50_s))
            series_latency.setdefault(name + " p90", []).append((cell.concurrency, cell.summary.latency_p90_s))
        if cell.summary.throughput_per_min is not None:
            series_throughput.setdefault(name, []).append((cell.concurrency, cell.summary.throughput_per_min))
    figures = {
        "latency_vs_concurrency.png": plots.versus_concurrency(series_latency, "latency (s)", "Latency vs concurrency"),
        "throughput_vs_concurrency.png": plots.versus_concurrency(
            series_throughput, "videos / min", "Throughput vs concurrency"
        ),
    }
    last = cells[-1] if cells else None
    if last is not None:
        origin = min(v.timings.created for v in last.views)
        rows = [
            plots.timeline_row(f"{i}", origin, v.timings, v.finished_at, done=v.state is RequestState.DONE)
            for i, v in enumerate(sorted(last.views, key=lambda v: v.timings.sent or 0))
        ]
        figures["request_timeline.png"] = plots.request_timeline(rows)
    paths = []
    for name, figure in figures.items():
        figure.savefig(out / name)
        paths.append(out / name)
    return paths


# (cell label, requests finished in the cell, requests in the cell)
ProgressCallback = Callable[[str, int, int], None]
# A stage of a fleet bench in a few words: "2x1 base: starting 2 replicas"
StageCallback = Callable[[str], None]


def cell_grid(config: BenchConfig) -> list[tuple[str, bool, int]]:
    return [(t, g, c) for t in config.tiers for g in config.guardrails for c in config.concurrencies]


def cell_label(tier: str, guardrails: bool, concurrency: int) -> str:
    return f"{tier} guard={'on' if guardrails else 'off'} c={concurrency}"


async def _run_cells(
    pool: EndpointPool,
    store: OutputStore,
    settings: StudioSettings,
    config: BenchConfig,
    on_progress: ProgressCallback,
    fleet: Fleet | None = None,
) -> list[CellResult]:
    cells: list[CellResult] = []
    for tier, guard, concurrency in cell_grid(config):
        label = cell_label(tier, guard, concurrency)
        label, done = (f"{fleet.label} · {label}" if fleet else label), 0
        on_progress(label, 0, config.requests)

        def advance(label: str = label) -> None:
            nonlocal done
            done += 1
            on_progress(label, done, config.requests)

        cells.append(await run_cell(pool, store, config, tier, guard, concurrency, settings, advance, fleet))
    return cells


def _environment(started: float) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "started": started,
        "finished": time.time(),
    }


def _write_report(out: Path, report: dict[str, Any], cells: list[CellResult]) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    write_csv(out / "requests.csv", report["requests"])
    write_csv(out / "summary.csv", report["cells"])
    write_plots(out, cells)


async def bench_pool(
    pool: EndpointPool,
    store: OutputStore,
    settings: StudioSettings,
    config: BenchConfig,
    out: Path,
    on_progress: ProgressCallback,
    manager: FleetManager | None = None,
) -> dict[str, Any]:
    """Every cell of the grid on the endpoints of `pool`, then report.json, the CSVs and the plots in `out`.
    The page's Bench view runs this on the studio's endpoints; `omni-studio bench --url` on the servers given.
    `manager`: the studio's own fleet that serves `pool`, where the studio started it: the report then names its
    layout (a fleet of the base variant, as a layout bench would), so that a plan can model it."""
    out.mkdir(parents=True, exist_ok=True)
    # The model the servers serve, as they name it (a remote server's is not the settings' default).
    served = await asyncio.to_thread(pool.served_models)
    await wait_until_warm([endpoint.url for endpoint in pool.endpoints], settings.init_timeout_s)
    fleet = running_fleet(settings, len(pool.endpoints)) if manager is not None else None
    started = time.time()
    cells = await _run_cells(pool, store, settings, config, on_progress, fleet)
    report: dict[str, Any] = {
        "config": {
            **config.model_dump(mode="json"),
            "engine": settings.engine,
            "model": ", ".join(served) or settings.model,
            "endpoints": [ep.url for ep in pool.endpoints],
            "in_flight_slots": settings.in_flight_slots,
            "spread": spread_record(),
        },
        "environment": _environment(started),
        # Where a figure is missing on purpose, the report says why.
        "notes": _notes(settings),
        "cells": [cell.row() for cell in cells],
        "requests": request_rows(cells),
        "recommendation": recommendation(cells, config.slo_s),
    }
    if fleet is not None and manager is not None:
        servers = manager.servers
        record = {
            **fleet.describe(),
            "endpoints": [ep.url for ep in pool.endpoints],
            "commands": [server.status().command for server in servers],
            "model": report["config"]["model"],
        }
        report["fleets"] = [record]
    _write_report(out, report, cells)
    return report


def _notes(settings: StudioSettings) -> list[str]:
    """What the report's figures cannot say for this engine's servers (a server that reports latency only)."""
    split = engine_kind(settings).capabilities.queue_and_inference
    return [] if split or split.why_not is None else [split.why_not]


async def _bench_fleet(
    fleet: Fleet,
    store: OutputStore,
    config: BenchConfig,
    out: Path,
    on_progress: ProgressCallback,
    on_stage: StageCallback,
) -> tuple[dict[str, Any], list[CellResult]]:
    """One fleet: start it, warm every replica, run the cells, stop it (whatever happens)."""
    replicas = fleet.layout.replicas
    on_stage(f"{fleet.label}: starting {replicas} replica{'s' * (replicas != 1)}")
    record: dict[str, Any] = fleet.describe()
    try:
        manager = await asyncio.to_thread(start_fleet, fleet, out / "logs" / fleet.slug)
    except (ServerStartError, LaunchError) as exc:
        on_stage(f"{fleet.label}: did not start: {exc}")
        return {**record, "error": str(exc)}, []
    try:
        servers = manager.servers
        record.update(
            endpoints=[server.base_url for server in servers],
            startup_s=[server.status().startup_s for server in servers],
            commands=[server.status().command for server in servers],
            **await asyncio.to_thread(placement, fleet, servers),
        )
        if fleet.on_ray:
            on_stage(f"{fleet.label}: {placement_line(record['nodes'])}")
        pool = manager.pool
        assert pool is not None  # started: its pool is built
        try:
            async with pool.health_watched():
                record["model"] = ", ".join(await asyncio.to_thread(pool.served_models)) or fleet.settings.model
                on_stage(f"{fleet.label}: warming every replica")
                await warm_fleet(pool, store, config, fleet.settings, replicas)
                cells = await _run_cells(pool, store, fleet.settings, config, on_progress, fleet)
        finally:
            await pool.close()
    finally:
        on_stage(f"{fleet.label}: stopping")
        await asyncio.to_thread(manager.close)
    for cell in cells:
        cell.nodes = [node["node"] for node in record.get("nodes", [])] or None
    return record, cells


def compare_fleets(cells: list[CellResult], slo_s: float | None) -> tuple[dict[str, Any], list[Recommendation]]:
    """The comparison of fleets, as report keys: rows marked with their Pareto membership, the Pareto set and
    one recommendation per tier; and the recommendations themselves."""
    rows = [cell.row() for cell in cells]
    pareto = fronts(rows)
    members = {id(row) for front in pareto.values() for row in front}
    for row in rows:
        row["pareto"] = id(row) in members
    chosen = recommend(rows, slo_s)
    parts = {
        "cells": rows,
        "pareto": {group: [cell_name(row) for row in front] for group, front in pareto.items()},
        "recommendations": [choice.as_dict() for choice in chosen],
        "recommendation": [choice.line() for choice in chosen],
    }
    return parts, chosen


async def bench_fleets(
    fleets: list[Fleet],
    store: OutputStore,
    settings: StudioSettings,
    config: BenchConfig,
    out: Path,
    on_progress: ProgressCallback,
    on_stage: StageCallback,
    *,
    plan_rate_per_min: float | None = None,
    verify: CapacityPlan | None = None,
) -> dict[str, Any]:
    """Every cell on each fleet in turn, then the report, the CSVs, the plots and the Pareto plot in `out`.
    A fleet that does not start is reported and skipped; where none starts, ServerStartError says why for each.
    `plan_rate_per_min`: a capacity plan at that rate from the cells, in the report (and plan.json, plan.png);
    `verify`: a plan whose fleets these cells ran at its rate, its figures beside theirs in the report."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    on_ray = next((fleet.settings for fleet in fleets if fleet.on_ray), None)
    cluster = await asyncio.to_thread(cluster_record, on_ray) if on_ray else {"kind": "local"}
    if on_ray:
        on_stage(cluster_line(cluster))
    records: list[dict[str, Any]] = []
    cells: list[CellResult] = []
    for fleet in fleets:
        record, fleet_cells = await _bench_fleet(fleet, store, config, out, on_progress, on_stage)
        records.append(record)
        cells.extend(fleet_cells)
    if not cells:
        raise ServerStartError(
            "no fleet of the bench started: " + "; ".join(r["label"] + ": " + r["error"] for r in records)
        )
    fidelity, baseline = None, baseline_of(fleets)
    if baseline is not None:
        on_stage(f"comparing each variant's videos with those of {baseline}")
        fidelity = await asyncio.to_thread(compare_variants, fleets, cells)
    parts, chosen = compare_fleets(cells, config.slo_s)
    if fidelity is not None:
        for row, columns in zip(parts["cells"], fidelity.cell_columns, strict=True):
            row.update(columns)
    report = {
        "config": {
            **config.model_dump(mode="json"),
            "engine": settings.engine,
            "model": next((r["model"] for r in records if r.get("model")), settings.model),
            "in_flight_slots": settings.in_flight_slots,  # the studio's (None: 8 per server), for a plan
            "spread": spread_record(),
        },
        "environment": _environment(started),
        "cluster": cluster,
        "fleets": records,
        **parts,
        "requests": request_rows(cells),
    }
    if fidelity is not None:  # what each variant does to the videos, beside what it does to the speed
        report["fidelity"] = fidelity.as_dict()
    if plan_rate_per_min is not None:
        report["plan"] = _plan(report, config, plan_rate_per_min, out)
    if verify is not None:
        report["verify"] = check_plan(verify, report, verify.source).model_dump(mode="json")
    _write_report(out, report, cells)
    pareto_figure(parts["cells"], chosen, config.slo_s).savefig(out / PARETO_PLOT)
    return report


def _plan(report: dict[str, Any], config: BenchConfig, rate_per_min: float, out: Path) -> dict[str, Any]:
    """The report's own capacity plan at `rate_per_min` within its SLO (plan.json and plan.png beside it), or why
    there is none."""
    if config.slo_s is None:
        return {"error": "a plan needs the latency objective: give --slo-seconds"}
    try:
        plan = make_plan(report, PlanInputs(rate_per_min=rate_per_min, slo_s=config.slo_s), str(out / "report.json"))
    except PlanError as exc:
        return {"error": str(exc)}
    write_plan(plan, out)
    return plan.model_dump(mode="json")


async def run_bench(
    settings: StudioSettings,
    config: BenchConfig,
    out: Path,
    console: Console | None = None,
    fleets: list[Fleet] | None = None,
    *,
    plan_rate_per_min: float | None = None,
    verify: CapacityPlan | None = None,
) -> dict[str, Any]:
    """`omni-studio bench`: each fleet (layout x variant; by default --replicas x --tp as set) in turn, or the
    --url servers as they are. `fleets`: planned already (plan_bench), else planned here. `plan_rate_per_min` and
    `verify`: as bench_fleets takes them (fleets the bench starts only)."""
    console = console or Console(stderr=True, soft_wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    store = OutputStore(out / "outputs")
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            tasks: dict[str, Any] = {}

            def on_progress(label: str, done: int, total: int) -> None:
                if label not in tasks:
                    tasks[label] = progress.add_task(label, total=total)
                progress.update(tasks[label], completed=done)

            if not engine_kind(settings).managed:
                if not settings.remote_urls:
                    raise ValueError(f"{settings.engine} engine: give at least one --url")
                if config.layouts or config.variants:
                    raise ValueError("layouts and variants are fleets the bench starts; --url servers run already")
                attached = FleetManager(settings, store.logs_dir)  # the --url servers' pool, as the page has it
                await asyncio.to_thread(attached.start)
                pool = attached.pool
                assert pool is not None
                try:
                    async with pool.health_watched():
                        return await bench_pool(pool, store, settings, config, out, on_progress)
                finally:
                    await pool.close()
            # With --cluster ray: one Ray for every fleet, left at the end where the bench joined it.
            with bench_cluster(settings):
                fleets = fleets if fleets is not None else plan_bench(settings, config)
                return await bench_fleets(
                    fleets,
                    store,
                    settings,
                    config,
                    out,
                    on_progress,
                    console.print,
                    plan_rate_per_min=plan_rate_per_min,
                    verify=verify,
                )
    finally:
        store.close()
