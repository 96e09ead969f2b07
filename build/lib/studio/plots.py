"""The PNG figures `omni-studio bench` writes to disk (matplotlib, no display): latency distribution, request
timeline, throughput over time, latency/throughput vs concurrency. The page draws its own live figures with
Gradio's native plots (studio/ui/figures.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display anywhere: render to images only
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

QUEUE_COLOR = "#f2a541"
INFERENCE_COLOR = "#3a7ca5"
OTHER_COLOR = "#b0b0b0"
FAILED_COLOR = "#c0392b"


@dataclass(frozen=True)
class TimelineRow:
    label: str
    start_s: float  # sent, relative to the first request's creation
    queue_s: float
    inference_s: float
    other_s: float  # download and validation after the server finished
    failed: bool = False


def _figure(width: float = 6.0, height: float = 3.2) -> tuple[Figure, plt.Axes]:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def latency_histogram(latencies: Sequence[float], p50: float | None = None, p90: float | None = None) -> Figure:
    fig, ax = _figure()
    if latencies:
        ax.hist(latencies, bins=min(30, max(5, len(latencies) // 2)), color=INFERENCE_COLOR, alpha=0.85)
        for value, name in ((p50, "p50"), (p90, "p90")):
            if value is not None:
                ax.axvline(value, color="black", linestyle="--", linewidth=1)
                ax.text(value, ax.get_ylim()[1] * 0.95, f" {name}", va="top")
    ax.set_xlabel("latency (s)")
    ax.set_ylabel("requests")
    ax.set_title("Latency distribution")
    return fig


def request_timeline(rows: Sequence[TimelineRow]) -> Figure:
    """One bar per request on one time axis: queue wait then inference, so concurrency shows."""
    fig, ax = _figure(height=max(2.5, min(12.0, 0.22 * len(rows) + 1.2)))
    for i, row in enumerate(rows):
        ax.barh(i, row.queue_s, left=row.start_s, color=QUEUE_COLOR, height=0.8)
        ax.barh(
            i,
            row.inference_s,
            left=row.start_s + row.queue_s,
            color=FAILED_COLOR if row.failed else INFERENCE_COLOR,
            height=0.8,
        )
        if row.other_s > 0:
            ax.barh(i, row.other_s, left=row.start_s + row.queue_s + row.inference_s, color=OTHER_COLOR, height=0.8)
    ax.set_yticks(range(len(rows)), [row.label for row in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first request")
    ax.set_title("Request timeline (queue wait, inference, download)")
    legend = {"queue wait": QUEUE_COLOR, "inference": INFERENCE_COLOR, "download": OTHER_COLOR}
    if any(row.failed for row in rows):
        legend["failed"] = FAILED_COLOR
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in legend.values()]
    ax.legend(handles, list(legend), loc="lower right", fontsize=7)
    return fig


def throughput_over_time(series: Sequence[tuple[float, float]]) -> Figure:
    fig, ax = _figure()
    if series:
        xs, ys = zip(*series, strict=True)
        ax.step(xs, ys, where="post", color=INFERENCE_COLOR)
    ax.set_xlabel("seconds since the first request")
    ax.set_ylabel("videos / min")
    ax.set_title("Throughput over time")
    return fig


def versus_concurrency(points: dict[str, Sequence[tuple[float, float]]], ylabel: str, title: str) -> Figure:
    """Lines of (concurrency, value), one per series (e.g. tier): latency or throughput vs concurrency."""
    fig, ax = _figure()
    for name, values in points.items():
        if values:
            xs, ys = zip(*sorted(values), strict=True)
            ax.plot(xs, ys, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(points) > 1:
        ax.legend(fontsize=8)
    return fig
