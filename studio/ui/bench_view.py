"""The page's Bench view: the cells of `omni-studio bench` (tier x guardrails x concurrency), run by the same
engine (studio.backend.bench.bench_pool) on the studio's own endpoints, with progress while it runs and the report,
table, recommendation and plots at the end. No gradio here: page.py lays it out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from studio import tiers
from studio.backend.bench import BenchConfig, bench_pool, cell_grid, check_tiers, parse_list
from studio.backend.controller import StudioController

BENCH_HEADERS = [
    "tier",
    "guardrails",
    "concurrency",
    "endpoints",
    "completed",
    "failed",
    "p50 s",
    "p90 s",
    "p99 s",
    "max s",
    "queue wait s",
    "inference s",
    "videos/min",
    "goodput",
]
MAX_BENCH_REQUESTS = 1000
PLOT_FILES = ("latency_vs_concurrency.png", "throughput_vs_concurrency.png", "request_timeline.png")

# Progress between yields: (cell label, done, total) and the cells finished so far.
BenchUpdate = tuple[str, list[list[Any]], str, list[str], str | None]


def _text(value: str) -> str:
    """Text shown in Markdown: markup escaped, quotes kept readable."""
    return html.escape(value, quote=False)


_busy: set[int] = set()  # ids of controllers running a bench now


def _number(value: Any, name: str, low: float, high: float, integer: bool = True) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if integer and number != int(number):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {number:g}")
    return int(number) if integer else number


def bench_config(form: dict[str, Any]) -> BenchConfig:
    """The form's values as a BenchConfig, or ValueError saying what is wrong."""
    try:
        concurrencies = parse_list(str(form.get("concurrency") or ""), int)
    except ValueError:
        raise ValueError(
            f"concurrency takes whole numbers separated by commas, got {form.get('concurrency')!r}"
        ) from None
    if not concurrencies:
        raise ValueError("give at least one concurrency, e.g. 1,4")
    for value in concurrencies:
        _number(value, "each concurrency", 1, 256)
    chosen_tiers = check_tiers(list(form.get("tiers") or []))
    if not chosen_tiers:
        raise ValueError("pick at least one tier")
    guard = [str(v).lower() for v in form.get("guardrails") or []]
    if not guard or any(v not in ("on", "off") for v in guard):
        raise ValueError("pick guardrails on, off or both")
    aspect = str(form.get("aspect") or "16:9")
    if aspect not in tiers.ASPECTS:
        raise ValueError(f"unknown aspect {aspect!r}")
    rate = _number(form.get("request_rate") or 0, "request rate", 0, 1000, integer=False)
    slo = _number(form.get("slo_s") or 0, "SLO", 0, 86400, integer=False)
    return BenchConfig(
        requests=_number(form.get("requests"), "requests per cell", 1, MAX_BENCH_REQUESTS),
        concurrencies=concurrencies,
        tiers=chosen_tiers,
        aspect=aspect,
        frames=_number(form.get("frames"), "frames", 1, 1000) if form.get("frames") else None,
        steps=_number(form.get("steps"), "steps", 1, 200) if form.get("steps") else None,
        guardrails=[v == "on" for v in dict.fromkeys(guard)],
        request_rate=rate or None,
        warmup=_number(form.get("warmup") or 0, "warm-up requests", 0, 100),
        slo_s=slo or None,
    )


def summary_rows(report: dict[str, Any]) -> list[list[Any]]:
    def r(value: Any, digits: int = 2) -> Any:
        return round(value, digits) if isinstance(value, float) else value

    return [
        [
            cell["tier"],
            "on" if cell["guardrails"] else "off",
            cell["concurrency"],
            cell["endpoints"],
            cell["completed"],
            cell["failed"],
            r(cell["latency_p50_s"]),
            r(cell["latency_p90_s"]),
            r(cell["latency_p99_s"]),
            r(cell["latency_max_s"]),
            r(cell["queue_wait_mean_s"]),
            r(cell["inference_mean_s"]),
            r(cell["videos_per_min"]),
            r(cell["goodput"]),
        ]
        for cell in report["cells"]
    ]


async def run_bench_view(controller: StudioController, form: dict[str, Any]) -> AsyncIterator[BenchUpdate]:
    """Yields (status, summary rows, recommendation, plot paths, report path) while the bench runs and once at
    the end. One bench at a time per studio; generation from the Generate view at the same time skews it."""
    try:
        config = bench_config(form)
    except ValueError as exc:
        yield f"**bench not started**: {_text(str(exc))}", [], "", [], None
        return
    if id(controller) in _busy:
        yield "**bench not started**: a bench is already running in this studio", [], "", [], None
        return
    _busy.add(id(controller))
    try:
        if controller.starting:
            yield "waiting for the engine to be ready ...", [], "", [], None
            await controller.wait_until_ready()
        if not controller.ready() or controller.pool is None:
            yield f"**bench not started**: {_text(controller.engine_summary())}", [], "", [], None
            return
        settings = controller.settings
        if config.frames is None:
            config = dataclasses.replace(config, frames=controller.default_frames(config.tiers[0]))
        out = Path(controller.store.root) / "bench" / time.strftime("%Y%m%d_%H%M%S")
        cells = len(cell_grid(config))
        progress: dict[str, tuple[int, int]] = {}

        def on_progress(label: str, done: int, total: int) -> None:
            progress[label] = (done, total)

        task = asyncio.create_task(bench_pool(controller.pool, controller.store, settings, config, out, on_progress))
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
            yield status, [], "", [], None
        try:
            report = task.result()
        except Exception as exc:  # shown in the page; nothing of the bench's finished requests is lost (history)
            yield f"**bench failed**: {_text(f'{type(exc).__name__}: {exc}')}", [], "", [], None
            return
        plots = [str(out / name) for name in PLOT_FILES if (out / name).is_file()]
        recommendation = "\n".join(f"- {_text(line)}" for line in report["recommendation"])
        status = f"done in {time.monotonic() - started:.0f} s: {cells} cell(s); report in `{_text(str(out))}`"
        yield status, summary_rows(report), recommendation, plots, str(out / "report.json")
    finally:
        _busy.discard(id(controller))
