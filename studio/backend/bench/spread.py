"""How sure a cell's figures are: 95% bootstrap intervals of its p50, its p90 and its videos/min.

A cell measures a few requests; their figures would come out otherwise on another run of the same cell. The
bootstrap draws the cell again from its own requests (with replacement) many times and reads the figure off each
draw: the middle 95% of those is the interval. The draws come from a fixed seed, so that the same report gives the
same intervals. Latencies are drawn request by request; videos/min from the gaps between one video's end and the
next (on the cell's in-flight clock, as the summary counts its throughput), so the rate keeps the cell's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from studio.backend.runs.stats import InFlightClock, RequestSample

CONFIDENCE = 0.95
RESAMPLES = 2000  # draws per interval: its ends move by well under 1% between seeds at this count
SEED = 0  # fixed: the same requests give the same intervals
# The report's columns of each interval, by the figure they bound.
INTERVAL_COLUMNS = {
    "latency_p50_s": ("latency_p50_low_s", "latency_p50_high_s"),
    "latency_p90_s": ("latency_p90_low_s", "latency_p90_high_s"),
    "videos_per_min": ("videos_per_min_low", "videos_per_min_high"),
}


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def _bounds(draws: np.ndarray, point: float, confidence: float) -> Interval:
    tail = (1 - confidence) / 2 * 100
    low, high = (float(v) for v in np.percentile(draws, [tail, 100 - tail]))
    # With a handful of requests the draws of a high percentile can all sit on one side of the cell's own figure;
    # the interval is widened to hold it, so that "1.29 s (1.10-1.45)" never reads as a contradiction.
    return Interval(min(low, point), max(high, point))


def percentile_interval(
    values: Sequence[float],
    q: float,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval | None:
    """The bootstrap interval of the q-th percentile (numpy's, as the summary's) of `values`; None below two values
    (one request has no spread to draw from)."""
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = np.percentile(rng.choice(data, size=(resamples, len(data))), q, axis=1)
    return _bounds(draws, float(np.percentile(data, q)), confidence)


def rate_interval(
    ends_s: Sequence[float],
    window_s: float,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval | None:
    """The bootstrap interval of videos/min, made of videos ending at `ends_s` (in-flight seconds from the cell's
    start) over `window_s` in flight. Each draw takes as many gaps between ends as there were, with replacement, and
    the window's tail after the last video as it was. In a closed loop of several requests the gaps come in groups
    (a batch's videos end together), which the draws scatter: the interval is then wider than the run's own, the
    safe side for saying whether two cells differ. None below two videos."""
    ends = np.sort(np.asarray(ends_s, dtype=float))
    if len(ends) < 2 or window_s <= 0:
        return None
    gaps = np.diff(np.concatenate([[0.0], ends]))
    tail = max(0.0, window_s - float(ends[-1]))
    rng = np.random.default_rng(seed)
    spans = rng.choice(gaps, size=(resamples, len(gaps))).sum(axis=1) + tail
    draws = len(ends) * 60.0 / np.maximum(spans, 1e-9)
    return _bounds(draws, len(ends) * 60.0 / window_s, confidence)


@dataclass(frozen=True)
class CellSpread:
    """A cell's intervals; None where it has too few requests done for one."""

    p50: Interval | None = None
    p90: Interval | None = None
    videos_per_min: Interval | None = None

    def columns(self) -> dict[str, float | None]:
        """The intervals as the report's columns (INTERVAL_COLUMNS)."""
        figures = {"latency_p50_s": self.p50, "latency_p90_s": self.p90, "videos_per_min": self.videos_per_min}
        row: dict[str, float | None] = {}
        for figure, (low, high) in INTERVAL_COLUMNS.items():
            interval = figures[figure]
            row[low] = None if interval is None else interval.low
            row[high] = None if interval is None else interval.high
        return row


def cell_spread(samples: Sequence[RequestSample], seed: int = SEED) -> CellSpread:
    """The intervals of a cell's figures from its requests (those the summary counts)."""
    done = [s for s in samples if s.state == "done" and s.latency_s is not None]
    latencies = [s.latency_s for s in done if s.latency_s is not None]
    clock = InFlightClock(span for s in samples if (span := s.span) is not None)
    ends = [clock(s.finished) for s in done if s.finished is not None]
    return CellSpread(
        p50=percentile_interval(latencies, 50, seed=seed),
        p90=percentile_interval(latencies, 90, seed=seed),
        videos_per_min=rate_interval(ends, clock.total_s, seed=seed) if len(ends) == len(done) else None,
    )


def interval_of(row: dict[str, Any], figure: str) -> Interval | None:
    """A report row's interval of `figure` (a key of INTERVAL_COLUMNS), where it has one."""
    low, high = (row.get(key) for key in INTERVAL_COLUMNS[figure])
    return None if low is None or high is None else Interval(float(low), float(high))


def with_interval(row: dict[str, Any], figure: str, digits: int = 2) -> str | None:
    """A figure of a report row with its interval: "1.29 (1.10–1.45)"; the figure alone where it has none."""
    point = row.get(figure)
    if point is None:
        return None
    interval = interval_of(row, figure)
    text = f"{point:.{digits}f}"
    return text if interval is None else f"{text} ({interval.low:.{digits}f}–{interval.high:.{digits}f})"


def spread_record() -> dict[str, Any]:
    """How the report's intervals were made, for its config."""
    return {"confidence": CONFIDENCE, "resamples": RESAMPLES, "seed": SEED, "method": "bootstrap percentile"}
