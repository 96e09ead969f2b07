"""The Generate tab's figures as DataFrames for Gradio's native plots: latency distribution, request timeline,
throughput over time. Cheap to rebuild on every change; the browser draws them (Vega-Lite) and makes them
interactive. The PNGs `omni-studio bench` writes to disk are studio/plots.py's.

The plots take new data without being rebuilt only while their other properties stay as built, so each frame
carries everything its plot needs, the colour of every phase included.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.visitors import Visitor

THROUGHPUT_WINDOW_S = 10.0
TIMELINE_REQUESTS = 80  # the most recent ones; more bars than this are too thin to read

# Timeline phases, in the order a request goes through them. A bar's segments stack in the reverse order of
# the colours' first appearance in the data (Gradio gives Vega-Lite the colour domain in that order, taken from
# the first data a plot draws), so every request lists every phase, last first: each bar reads bottom to top in
# time, and a phase first seen late (a failure) still has its colour.
BEFORE = "not yet submitted"  # drawn transparent: it only places the bar's start on the time axis
STUDIO_WAIT = "waiting in the studio"
QUEUE_WAIT = "queued at the server"
INFERENCE = "inference"
FAILED = "failed"  # what a request that made no video spent at the server
CANCELLED = "cancelled"
DOWNLOAD = "download"
PHASE_COLORS = {
    BEFORE: "rgba(0,0,0,0)",
    STUDIO_WAIT: "#d5d5d5",
    QUEUE_WAIT: "#f2a541",
    INFERENCE: "#3a7ca5",
    FAILED: "#c0392b",
    CANCELLED: "#9b59b6",
    DOWNLOAD: "#8e8e8e",
}
ENDED_PHASE = {RequestState.DONE: INFERENCE, RequestState.FAILED: FAILED, RequestState.CANCELLED: CANCELLED}
LEGEND = [phase for phase in PHASE_COLORS if phase != BEFORE]

# Column names: what the plots' axes and tooltips say.
LATENCY = "latency s"
WITHIN = "% of videos within"
REQUEST = "request"
REQUEST_ID = "id"
SECONDS = "seconds"
PHASE = "phase"
ELAPSED = "seconds since the first request"
THROUGHPUT = "videos/min"


@dataclass(frozen=True)
class PageFigures:
    latency: pd.DataFrame
    timeline: pd.DataFrame
    throughput: pd.DataFrame


def latency_frame(board: RequestBoard, scope: Visitor | None = None) -> pd.DataFrame:
    """The latency distribution as a cumulative curve: the share of finished videos made within each latency
    (the percentiles read off it; no bins to choose, whatever the range)."""
    latencies = sorted(
        v.timings.latency_s for v in board.views(scope) if v.state is RequestState.DONE and v.timings.latency_s
    )
    shares = [round(100.0 * rank / len(latencies), 1) for rank in range(1, len(latencies) + 1)]
    return pd.DataFrame({LATENCY: [round(value, 2) for value in latencies], WITHIN: shares}, columns=[LATENCY, WITHIN])


def _segments(view: RequestView, origin: float) -> list[tuple[str, float]]:
    t = view.timings
    sent = t.sent if t.sent is not None else t.created
    server_end = t.completed or view.finished_at or sent
    at_server = (t.inference_s or 0.0) if t.completed else max(0.0, server_end - sent - (t.queue_wait_s or 0.0))
    return [
        (BEFORE, t.created - origin),
        (STUDIO_WAIT, sent - t.created),
        (QUEUE_WAIT, t.queue_wait_s or 0.0),
        (ENDED_PHASE.get(view.state, FAILED), at_server),
        (DOWNLOAD, max(0.0, t.downloaded - server_end) if t.downloaded else 0.0),
    ]


def timeline_frame(board: RequestBoard, scope: Visitor | None = None) -> pd.DataFrame:
    """One bar per finished request on one time axis (in the order they were sent), so concurrency shows."""
    views = board.views(scope)
    origin = min((v.timings.created for v in views), default=0.0)
    sent = sorted((v for v in views if v.state.finished and v.timings.sent is not None), key=lambda v: v.timings.sent)
    last_first = list(reversed(PHASE_COLORS))
    records = []
    for number, view in enumerate(sent[-TIMELINE_REQUESTS:], start=1):
        seconds = dict.fromkeys(last_first, 0.0) | dict(_segments(view, origin))
        records += [[f"{number:03d}", view.id, phase, round(seconds[phase], 3)] for phase in last_first]
    frame = pd.DataFrame(records, columns=[REQUEST, REQUEST_ID, PHASE, SECONDS])
    rank = {phase: index for index, phase in enumerate(last_first)}
    return frame.sort_values(PHASE, key=lambda column: column.map(rank), kind="stable", ignore_index=True)


def throughput_frame(board: RequestBoard, scope: Visitor | None = None) -> pd.DataFrame:
    """Videos per minute in each window of THROUGHPUT_WINDOW_S, drawn as steps (a window's rate held across it),
    so that even the first window is a line."""
    points = [
        (start + edge, round(rate, 2))
        for start, rate in board.throughput_series(THROUGHPUT_WINDOW_S, scope)
        for edge in (0.0, THROUGHPUT_WINDOW_S)
    ]
    return pd.DataFrame(points, columns=[ELAPSED, THROUGHPUT])


def page_figures(board: RequestBoard, scope: Visitor | None = None) -> PageFigures:
    """The figures of the requests `scope` sees (None: everyone's)."""
    return PageFigures(latency_frame(board, scope), timeline_frame(board, scope), throughput_frame(board, scope))
