"""The bench: the same run engine as the page, over a grid of cells (`omni-studio bench` and the page's Bench view).

A cell is one (tier, guardrails, concurrency) setting. Each cell sends its warm-up requests (not counted),
then its measured requests: closed loop (at most `concurrency` in flight) or open loop (Poisson arrivals at
`request_rate`). Results: report.json, requests.csv, summary.csv and PNG plots in the output folder, and a
recommendation printed last. The form (BenchConfig, parse_bench_config) is studio/backend/bench_config.py.
"""

from __future__ import annotations

import asyncio
import csv
import json
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from studio import plots
from studio.backend.bench_config import BenchConfig
from studio.backend.client import server_root
from studio.backend.launchers import embedded_launch, parse_gpus, vllm_omni_launch, world_size
from studio.backend.request_state import RequestState, RequestView
from studio.backend.router import EndpointPool
from studio.backend.runs import Run
from studio.backend.server_metrics import scrape
from studio.backend.spec import MAX_CONCURRENCY, RunSpec
from studio.backend.stats import LatencySummary, summarize
from studio.backend.store import OutputStore
from studio.backend.supervisor import ManagedServer
from studio.config import StudioSettings


@dataclass
class CellResult:
    tier: str
    guardrails: bool
    concurrency: int
    endpoints: int
    summary: LatencySummary
    views: list[RequestView]
    server_metrics: list[dict[str, Any]]

    def row(self) -> dict[str, Any]:
        s = self.summary
        e2el = [v.timings.latency_s for v in self.views if v.state is RequestState.DONE and v.timings.latency_s]
        duration = s.duration_s or 0.0
        good = (s.goodput or 0.0) * s.count if s.goodput is not None else None
        return {
            "tier": self.tier,
            "guardrails": self.guardrails,
            "concurrency": self.concurrency,
            "endpoints": self.endpoints,
            "completed": s.completed,
            "failed": s.failed,
            "latency_mean_s": s.latency_mean_s,
            "latency_p50_s": s.latency_p50_s,
            "latency_p90_s": s.latency_p90_s,
            "latency_p95_s": s.latency_p95_s,
            "latency_p99_s": s.latency_p99_s,
            "latency_max_s": s.latency_max_s,
            "queue_wait_mean_s": s.queue_wait_mean_s,
            "inference_mean_s": s.inference_mean_s,
            "videos_per_min": s.throughput_per_min,
            "goodput": s.goodput,
            "slo_s": s.slo_s,
            # vLLM-Omni's diffusion benchmark names, so figures compare.
            "duration": duration,
            "request_throughput": s.completed / duration if duration else None,
            "request_goodput": good / duration if duration and good is not None else None,
            "mean_e2el_ms": None if s.latency_mean_s is None else s.latency_mean_s * 1000,
            "median_e2el_ms": None if s.latency_p50_s is None else s.latency_p50_s * 1000,
            "p99_e2el_ms": None if s.latency_p99_s is None else s.latency_p99_s * 1000,
            "std_e2el_ms": float(_std(e2el)) * 1000 if e2el else None,
            "server_running_max": max((m.get("running") or 0 for m in self.server_metrics), default=None),
            "server_waiting_max": max((m.get("waiting") or 0 for m in self.server_metrics), default=None),
        }


def _std(values: Sequence[float]) -> float:
    import numpy as np

    return float(np.std(values))


def poisson_arrivals(count: int, rate: float, rng: random.Random) -> list[float]:
    """Arrival offsets (s) of a Poisson process: exponential gaps with mean 1/rate."""
    now, offsets = 0.0, []
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def start_replicas(settings: StudioSettings, replicas: int, log_dir: Path) -> list[ManagedServer]:
    """K managed servers, each on its own port (and, for vLLM-Omni, its own GPU set)."""
    servers = []
    if settings.engine == "vllm-omni":
        per = world_size(settings)
        gpus = parse_gpus(settings.gpus) or [str(i) for i in range(per * replicas)]
        if len(gpus) < per * replicas:
            raise ValueError(
                f"{replicas} replicas x {per} GPUs each need {per * replicas} GPUs; --gpus gives {len(gpus)}"
            )
        groups = [",".join(gpus[i * per : (i + 1) * per]) for i in range(replicas)]
    else:
        groups = [settings.gpus] * replicas
    for index, group in enumerate(groups):
        replica = settings.model_copy(update={"gpus": group})
        launch = (
            (lambda port, s=replica: vllm_omni_launch(s, port))
            if settings.engine == "vllm-omni"
            else (lambda port, s=replica: embedded_launch(s, port))
        )
        servers.append(
            ManagedServer(launch, log_path=log_dir / f"replica{index}.log", init_timeout_s=settings.init_timeout_s)
        )
    try:
        for server in servers:
            server.start(wait=False)
        for server in servers:
            server.wait_ready()
    except Exception:
        for server in servers:
            server.stop()
        raise
    return servers


async def run_cell(
    pool: EndpointPool,
    store: OutputStore,
    config: BenchConfig,
    tier: str,
    guardrails: bool,
    concurrency: int,
    settings: StudioSettings,
    on_done: Callable[[], None],
) -> CellResult:
    rng = random.Random(f"{config.seed}-{tier}-{guardrails}-{concurrency}")
    prompts = [config.prompts[i % len(config.prompts)] for i in range(config.requests)]
    spec_args = dict(
        tier=tier,
        aspect=config.aspect,
        frames=config.frames,
        steps=config.steps,
        seed=config.seed,
        seed_policy="increment",
        guardrails=guardrails,
        model=settings.served_model_name,
    )
    if config.warmup:
        warm = Run(
            RunSpec(prompts=prompts[: config.warmup], concurrency=concurrency, **spec_args),
            pool,
            store,
            request_timeout_s=settings.request_timeout_s,
        )
        await warm.wait()
    arrivals = poisson_arrivals(len(prompts), config.request_rate, rng) if config.request_rate else None
    cap = MAX_CONCURRENCY if config.request_rate else concurrency
    run = Run(
        RunSpec(prompts=prompts, concurrency=cap, **spec_args),
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
    try:
        async for view in run.updates():
            if view.state.finished:
                on_done()
    finally:
        sampler.cancel()
    summary = summarize([v.sample() for v in run.views], slo_s=config.slo_s, by_tier=False)
    return CellResult(tier, guardrails, concurrency, len(pool.endpoints), summary, run.views, samples)


def recommendation(cells: list[CellResult], slo_s: float | None) -> list[str]:
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
            f"(p50 {fastest.summary.latency_p50_s:.2f} s)"
        )
        if within:
            best = max(within, key=lambda c: c.summary.throughput_per_min or 0)
            slo = f"p90 within {slo_s:g} s" if slo_s is not None else "no SLO given"
            line += (
                f"; highest throughput with {slo} at concurrency {best.concurrency} x {best.endpoints} "
                f"endpoint(s): {best.summary.throughput_per_min or 0:.2f} videos/min "
                f"(p90 {best.summary.latency_p90_s:.2f} s)"
            )
        else:
            line += f"; no setting keeps p90 within {slo_s:g} s: add replicas or lower the tier"
        lines.append(line)
    return lines


def request_rows(cells: list[CellResult]) -> list[dict[str, Any]]:
    rows = []
    for cell in cells:
        for view in cell.views:
            rows.append(
                {
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
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


def write_plots(out: Path, cells: list[CellResult]) -> list[Path]:
    series_latency: dict[str, list[tuple[float, float]]] = {}
    series_throughput: dict[str, list[tuple[float, float]]] = {}
    for cell in cells:
        name = f"{cell.tier}{'' if cell.guardrails else ' no-guard'} x{cell.endpoints}"
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
            plots.TimelineRow(
                label=f"{i}",
                start_s=(v.timings.sent or origin) - origin,
                queue_s=v.timings.queue_wait_s or 0.0,
                inference_s=v.timings.inference_s or 0.0,
                other_s=max(0.0, (v.timings.downloaded or 0) - (v.timings.completed or 0))
                if v.timings.downloaded
                else 0,
                failed=v.state is not RequestState.DONE,
            )
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


def cell_grid(config: BenchConfig) -> list[tuple[str, bool, int]]:
    return [(t, g, c) for t in config.tiers for g in config.guardrails for c in config.concurrencies]


def cell_label(tier: str, guardrails: bool, concurrency: int) -> str:
    return f"{tier} guard={'on' if guardrails else 'off'} c={concurrency}"


async def bench_pool(
    pool: EndpointPool,
    store: OutputStore,
    settings: StudioSettings,
    config: BenchConfig,
    out: Path,
    on_progress: ProgressCallback,
    replicas: int | None = None,
) -> dict[str, Any]:
    """Every cell of the grid on the endpoints of `pool`, then report.json, the CSVs and the plots in `out`.
    The page's Bench view runs this on the studio's endpoints; `omni-studio bench` on the replicas it starts."""
    out.mkdir(parents=True, exist_ok=True)
    # The model the servers serve, as they name it (a remote server's is not the settings' default).
    served = await asyncio.to_thread(pool.served_models)
    cells: list[CellResult] = []
    started = time.time()
    for tier, guard, concurrency in cell_grid(config):
        label, done = cell_label(tier, guard, concurrency), 0
        on_progress(label, 0, config.requests)

        def advance(label: str = label) -> None:
            nonlocal done
            done += 1
            on_progress(label, done, config.requests)

        cells.append(await run_cell(pool, store, config, tier, guard, concurrency, settings, advance))
    summary_rows = [cell.row() for cell in cells]
    report = {
        "config": {
            **config.model_dump(),
            "replicas": replicas,
            "engine": settings.engine,
            "model": ", ".join(served) or settings.model,
            "endpoints": [ep.url for ep in pool.endpoints],
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "started": started,
            "finished": time.time(),
        },
        "cells": [{**row, "per_request": None} for row in summary_rows],
        "requests": request_rows(cells),
        "recommendation": recommendation(cells, config.slo_s),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    write_csv(out / "requests.csv", report["requests"])
    write_csv(out / "summary.csv", summary_rows)
    write_plots(out, cells)
    return report


async def run_bench(
    settings: StudioSettings, config: BenchConfig, out: Path, replicas: int = 1, console: Console | None = None
) -> dict[str, Any]:
    """`omni-studio bench`: start the replicas (or attach to --url servers), bench them, stop them."""
    console = console or Console(stderr=True, soft_wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    store = OutputStore(out / "outputs")
    servers: list[ManagedServer] = []
    try:
        if settings.engine == "remote":
            if not settings.remote_urls:
                raise ValueError("remote engine: give at least one --url")
            urls = [server_root(url) for url in settings.remote_urls]
        else:
            console.print(f"starting {replicas} {settings.engine} replica(s) of {settings.model} ...")
            servers = start_replicas(settings, replicas, out / "logs")
            for server in servers:
                console.print(f"  {server.base_url} ready in {server.status().startup_s:.1f} s")
            urls = [server.base_url for server in servers]
        pool = EndpointPool.from_urls(
            urls,
            api_key=settings.api_key_value(),
            http_timeout_s=settings.http_timeout_s,
            poll_interval_s=settings.poll_interval_s,
        )
        health = asyncio.create_task(pool.watch_health())
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

                return await bench_pool(pool, store, settings, config, out, on_progress, replicas=replicas)
        finally:
            health.cancel()
            await pool.close()
    finally:
        for server in servers:
            server.stop()
        store.close()
