"""The page's Bench view: the cells of `omni-studio bench` (tier x guardrails x concurrency), run by the same
engine (studio.backend.bench.bench_pool) on the studio's own endpoints, with progress while it runs and the report,
table, recommendation and plots at the end. The form is checked by the bench's own model (bench_config.py), as
the CLI's flags are. No gradio here: bench_tab.py lays it out.
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

from studio.backend.bench import bench_pool, cell_grid
from studio.backend.bench_config import BenchConfigError, parse_bench_config
from studio.backend.controller import StudioController

PLOT_FILES = ("latency_vs_concurrency.png", "throughput_vs_concurrency.png", "request_timeline.png")
# Report keys shown in the cells table, under the column names the table gives them.
SUMMARY_COLUMNS = {
    "tier": "tier",
    "guardrails": "guardrails",
    "concurrency": "concurrency",
    "endpoints": "endpoints",
    "completed": "completed",
    "failed": "failed",
    "latency_p50_s": "p50 s",
    "latency_p90_s": "p90 s",
    "latency_p99_s": "p99 s",
    "latency_max_s": "max s",
    "queue_wait_mean_s": "queue wait s (at least)",
    "inference_mean_s": "inference s (at most)",
    "videos_per_min": "videos/min",
    "goodput": "goodput",
}


@dataclass(frozen=True)
class BenchUpdate:
    """What the Bench tab shows, while the bench runs and once at the end."""

    status: str
    summary: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(SUMMARY_COLUMNS.values())))
    recommendation: str = ""
    plots: list[str] = field(default_factory=list)  # the PNGs the bench wrote
    report: str | None = None  # report.json


def _text(value: str) -> str:
    """Text shown in Markdown: markup escaped, quotes kept readable."""
    return html.escape(value, quote=False)


_busy: set[int] = set()  # ids of controllers running a bench now


NO_SLO = "no SLO set: goodput is the share within it"


def summary_table(report: dict[str, Any]) -> pd.DataFrame:
    table = pd.DataFrame(report["cells"], columns=list(SUMMARY_COLUMNS)).rename(columns=SUMMARY_COLUMNS)
    table["guardrails"] = table["guardrails"].map({True: "on", False: "off"})
    table = table.round(2)
    if table["goodput"].isna().all():
        table["goodput"] = NO_SLO  # a blank column would look like a failure to measure
    return table


async def run_bench_view(controller: StudioController, form: Mapping[str, Any]) -> AsyncIterator[BenchUpdate]:
    """Progress while the bench runs, then its results. `form`: the bench model's field names and values.
    One bench at a time per studio; generation from the Generate view at the same time skews it."""
    try:
        config = parse_bench_config(form)
    except BenchConfigError as exc:
        yield BenchUpdate(f"**bench not started**: {_text(str(exc))}")
        return
    if id(controller) in _busy:
        yield BenchUpdate("**bench not started**: a bench is already running in this studio")
        return
    _busy.add(id(controller))
    try:
        if controller.starting:
            yield BenchUpdate("waiting for the engine to be ready ...")
            await controller.wait_until_ready()
        if not controller.ready() or controller.pool is None:
            yield BenchUpdate(f"**bench not started**: {_text(controller.engine_summary())}")
            return
        if config.frames is None:
            config = config.model_copy(update={"frames": controller.default_frames(config.tiers[0])})
        out = Path(controller.store.root) / "bench" / time.strftime("%Y%m%d_%H%M%S")
        cells = len(cell_grid(config))
        progress: dict[str, tuple[int, int]] = {}

        def on_progress(label: str, done: int, total: int) -> None:
            progress[label] = (done, total)

        task = asyncio.create_task(
            bench_pool(controller.pool, controller.store, controller.settings, config, out, on_progress)
        )
        started = time.monotonic()
        while not task.done():
            await asyncio.wait({task}, timeout=1.0)
            if progress:
                label, (done, total) = list(progress.items())[-1]
                status = (
                    f"running cell {len(progress)} of {cells}: {_text(label)}: {done}/{total} requests done"
                    f" · {time.monotonic() - started:.0f} s"
                )
            else:
                status = "starting ..."
            yield BenchUpdate(status)
        try:
            report = task.result()
        except Exception as exc:  # shown in the page; nothing of the bench's finished requests is lost (history)
            yield BenchUpdate(f"**bench failed**: {_text(f'{type(exc).__name__}: {exc}')}")
            return
        yield BenchUpdate(
            status=f"done in {time.monotonic() - started:.0f} s: {cells} cell(s); report in `{_text(str(out))}`",
            summary=summary_table(report),
            recommendation="\n".join(f"- {_text(line)}" for line in report["recommendation"]),
            plots=[str(out / name) for name in PLOT_FILES if (out / name).is_file()],
            report=str(out / "report.json"),
        )
    finally:
        _busy.discard(id(controller))
