"""The Generate tab's figures as DataFrames for Gradio's native plots: latency distribution, request timeline,
throughput while in flight. Cheap to rebuild on every change; the browser draws them (Vega-Lite) and makes them
interactive. The PNGs `omni-studio bench` writes to disk are studio/backend/bench/plots.py's.

They show the latest run by default, or the whole session; time axes count seconds of work in flight
(stats.InFlightClock), so idle gaps between runs take no room. Latency runs from pressing Generate to the video in
the page, as in the statistics (stats.LatencyParts).

The plots take new data without being rebuilt only while their other properties stay as built, so each frame
carries everything its plot needs, the colour of every phase included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from studio.backend.face import (
    InFlightClock,
    RequestBoard,
    RequestState,
    RequestView,
    Visitor,
    latency_parts,
    throughput_so_far,
)

TIMELINE_REQUESTS = 80  # the most recent ones; more bars than this are too thin to read

# What the plots cover: the control beside them offers both.
LATEST_RUN = "latest run"
SESSION = "session"
SPANS = (LATEST_RUN, SESSION)

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
# A request that failed or was cancelled at once still gets a sliver of its colour, this share of the longest bar
# (at least MIN_ENDED_S), or nothing red would show; the tooltip tells how long it really lasted.
MIN_ENDED_SHARE = 0.012
MIN_ENDED_S = 0.05

# Column names: what the plots' axes and tooltips say.
LATENCY = "latency s (Generate to video in the page)"
WITHIN = "% of videos within"
REQUEST = "request"
REQUEST_ID = "id"
SECONDS = "seconds"
PHASE = "phase"
LASTED = "lasted s"
IN_FLIGHT = "seconds in flight (idle gaps left out)"
THROUGHPUT = "videos/min while in flight, so far"
# The step of a latency curve: just below each latency the share is still the one before it.
STEP_S = 0.005


@dataclass(frozen=True)
class PageFigures:
    latency: pd.DataFrame
    timeline: pd.DataFrame
    throughput: pd.DataFrame

    @property
    def empty(self) -> bool:
        """No request of theirs has finished: the plots draw nothing, and the page says when they will."""
        return self.throughput.empty and bool((self.timeline[REQUEST] == "").all())


def span_views(board: RequestBoard, scope: Visitor | None = None, span: str = LATEST_RUN) -> list[RequestView]:
    """The requests the plots cover: of the latest run `scope` sees, or of the whole session."""
    return board.views(scope) if span == SESSION else board.latest_run_views(scope)


def _clock(views: list[RequestView]) -> InFlightClock:
    return InFlightClock(span for view in views if (span := view.sample().span) is not None)


def latency_frame(board: RequestBoard, scope: Visitor | None = None, span: str = LATEST_RUN) -> pd.DataFrame:
    """The latency distribution as a cumulative curve in steps from 0 s: the share of the videos made within
    each latency (the percentiles read off it; no bins to choose). From 0, so that one video is a step, not a
    lone point, and the axis keeps round ticks."""
    return latency_curve(span_views(board, scope, span))


def latency_curve(views: list[RequestView]) -> pd.DataFrame:
    latencies = [
        round(parts.latency_s, 2)
        for view in views
        if view.state is RequestState.DONE and (parts := latency_parts(view.timings)).latency_s is not None
    ]
    if not latencies:
        return empty_frame([LATENCY, WITHIN])
    values, counts = np.unique(latencies, return_counts=True)
    shares = np.cumsum(counts) * 100.0 / len(latencies)
    points, before = [(0.0, 0.0)], 0.0
    for value, share in zip(values.tolist(), shares.tolist(), strict=True):
        if value - STEP_S > points[-1][0]:
            points.append((round(value - STEP_S, 3), before))
        points.append((value, round(share, 1)))
        before = round(share, 1)
    return pd.DataFrame(points, columns=[LATENCY, WITHIN])


def empty_frame(columns: list[str]) -> pd.DataFrame:
    """No points, with numeric columns: a plot is built from its first data, the type of its axes too (a column of
    no type would give it words for an axis, kept when numbers come)."""
    return pd.DataFrame({column: pd.Series(dtype=float) for column in columns})


def _segments(view: RequestView, clock: InFlightClock) -> list[tuple[str, float]]:
    """The bar of a finished request: where it starts, then how long each phase lasted. A request done ends when
    its video arrived (its parts add up to its latency); one that made none ends when it ended."""
    t = view.timings
    if view.state is RequestState.DONE:
        parts = latency_parts(t)
        at_server = [(QUEUE_WAIT, parts.queue_s or 0.0), (INFERENCE, parts.inference_s or 0.0)]
        if parts.inference_s is None:  # a server that cannot tell its queue apart: all its time is drawn as making it
            at_server = [(QUEUE_WAIT, 0.0), (INFERENCE, parts.at_server_s or 0.0)]
        return [
            (BEFORE, clock(t.created)),
            (STUDIO_WAIT, parts.studio_wait_s or 0.0),
            *at_server,
            (DOWNLOAD, parts.download_s or 0.0),
        ]
    end = view.finished_at or t.completed or t.created
    sent = t.sent if t.sent is not None else end  # never sent: it waited in the studio until it ended
    server_end = max(sent, t.completed or end)
    return [
        (BEFORE, clock(t.created)),
        (STUDIO_WAIT, max(0.0, sent - t.created)),
        (ENDED_PHASE.get(view.state, FAILED), server_end - sent),
    ]


def timeline_frame(board: RequestBoard, scope: Visitor | None = None, span: str = LATEST_RUN) -> pd.DataFrame:
    """One bar per finished request on one time axis (in the order they were sent, or submitted where they never
    were), so concurrency shows. Every request lists every phase (see PHASE_COLORS)."""
    return timeline_bars(span_views(board, scope, span))


def timeline_bars(views: list[RequestView]) -> pd.DataFrame:
    finished = [view for view in views if view.state.finished]
    clock = _clock(finished)
    ordered = sorted(finished, key=lambda v: (v.timings.sent or v.timings.created, v.timings.created))
    bars = [(view, dict(_segments(view, clock))) for view in ordered[-TIMELINE_REQUESTS:]]
    longest = max((sum(seconds.values()) for _, seconds in bars), default=0.0)
    sliver = max(MIN_ENDED_S, MIN_ENDED_SHARE * longest)
    last_first = list(reversed(PHASE_COLORS))
    records = []
    if not bars:
        # Nothing finished yet: a bar with every phase, so that a plot first built from it has every phase's colour;
        # all of it transparent (one second before any request, so that the axis reads 0 to 1), none of it drawn.
        records = [["", "", phase, 1.0 if phase == BEFORE else 0.0, 0.0] for phase in last_first]
    for number, (view, seconds) in enumerate(bars, start=1):
        for phase in last_first:
            lasted = seconds.get(phase, 0.0)
            drawn = max(lasted, sliver) if phase in (FAILED, CANCELLED) and phase in seconds else lasted
            records.append([f"{number:03d}", view.id, phase, round(drawn, 3), round(lasted, 2)])
    frame = pd.DataFrame(records, columns=[REQUEST, REQUEST_ID, PHASE, SECONDS, LASTED])
    rank = {phase: index for index, phase in enumerate(last_first)}
    return frame.sort_values(PHASE, key=lambda column: column.map(rank), kind="stable", ignore_index=True)


def throughput_curve(views: list[RequestView]) -> pd.DataFrame:
    samples = [view.sample() for view in views if view.state.finished]
    points = [(round(t, 2), round(rate, 2)) for t, rate in throughput_so_far(samples)]
    if not points:
        return empty_frame([IN_FLIGHT, THROUGHPUT])
    frame = pd.DataFrame(points, columns=[IN_FLIGHT, THROUGHPUT])
    return frame.drop_duplicates(IN_FLIGHT, keep="last", ignore_index=True)


def page_figures(board: RequestBoard, scope: Visitor | None = None, span: str = LATEST_RUN) -> PageFigures:
    """The figures of the requests `scope` sees (None: everyone's), of their latest run or the whole session."""
    views = span_views(board, scope, span)
    return PageFigures(latency_curve(views), timeline_bars(views), throughput_curve(views))
