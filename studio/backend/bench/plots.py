"""The PNG figures `omni-studio bench` writes to disk (matplotlib, no display): latency distribution, request
timeline, throughput over time, latency/throughput vs concurrency. The page draws its own live figures with
Gradio's native plots (studio/ui/figures.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # no display anywhere: render to images only
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from studio.backend.runs.stats import Timings, latency_parts

STUDIO_WAIT_COLOR = "#d5d5d5"
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
    studio_wait_s: float = 0.0  # before start_s: from its submit, waiting for a free slot in the studio


def timeline_row(label: str, origin: float, timings: Timings, finished_at: float | None, done: bool) -> TimelineRow:
    """A request's bar, from its submit: the parts of its latency as the statistics count them
    (stats.LatencyParts), so a request done ends when its video arrived; one that made none, when it ended."""
    sent = timings.sent if timings.sent is not None else (finished_at or timings.created)
    if done:
        parts = latency_parts(timings)
        queue, other = parts.queue_s or 0.0, parts.download_s or 0.0
        # A server that cannot tell its queue apart: all its time is drawn as making the video.
        inference = parts.inference_s if parts.inference_s is not None else parts.at_server_s or 0.0
    else:
        queue, other = 0.0, 0.0
        inference = max(0.0, (timings.completed or finished_at or sent) - sent)
    return TimelineRow(
        label=label,
        start_s=sent - origin,
        queue_s=queue,
        inference_s=inference,
        other_s=other,
        failed=not done,
        studio_wait_s=max(0.0, sent - timings.created),
    )


def _figure(width: float = 6.0, height: float = 3.2) -> tuple[Figure, plt.Axes]:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def request_timeline(rows: Sequence[TimelineRow]) -> Figure:
    """One bar per request on one time axis: waiting in the studio, queue wait, inference, download, so
    concurrency shows and each bar ends where its latency does."""
    fig, ax = _figure(height=max(2.5, min(12.0, 0.22 * len(rows) + 1.2)))
    for i, row in enumerate(rows):
        if row.studio_wait_s > 0:
            ax.barh(i, row.studio_wait_s, left=row.start_s - row.studio_wait_s, color=STUDIO_WAIT_COLOR, height=0.8)
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
    ax.set_title("Request timeline")  # its phases are the legend's, below the axes
    legend = {"queue wait": QUEUE_COLOR, "inference": INFERENCE_COLOR, "download": OTHER_COLOR}
    if any(row.studio_wait_s > 0 for row in rows):
        legend = {"waiting in the studio": STUDIO_WAIT_COLOR, **legend}
    if any(row.failed for row in rows):
        legend["failed"] = FAILED_COLOR
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in legend.values()]
    # Outside the axes, so that no bar is hidden behind it.
    fig.legend(handles, list(legend), loc="outside lower center", ncols=len(legend), fontsize=7, frameon=False)
    return fig


def versus_concurrency(points: dict[str, Sequence[tuple[float, float]]], ylabel: str, title: str) -> Figure:
    """Lines of (concurrency, value), one per series (e.g. tier): latency or throughput vs concurrency."""
    fig, ax = _figure()
    for name, values in points.items():
        if values:
            xs, ys = zip(*sorted(values), strict=True)
            ax.plot(xs, ys, marker="o", label=name)
    ax.set_xscale("log", base=2)
    # The concurrencies measured, as plain numbers (a log axis would read 2^0, 2^1, 2^2).
    ticks = sorted({x for values in points.values() for x, _ in values})
    if ticks:
        ax.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(points) > 1:
        ax.legend(fontsize=8)
    return fig
