"""A cell's 95% bootstrap intervals: they hold the cell's own figure, narrow as requests add up, come out the same
from the same requests, and reach the report's row and the tables."""

from __future__ import annotations

import numpy as np

from studio.backend.bench.spread import (
    INTERVAL_COLUMNS,
    CellSpread,
    Interval,
    cell_spread,
    percentile_interval,
    rate_interval,
    with_interval,
)
from studio.backend.runs.stats import RequestSample, summarize
from studio.ui.bench_view import summary_table


def latencies(count: int, seed: int = 1) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(0.0, 0.3, count))


def test_an_interval_holds_the_point_estimate():
    for count in (2, 3, 5, 16, 200):
        values = latencies(count)
        for q in (50, 90):
            interval = percentile_interval(values, q)
            assert interval is not None and interval.low <= np.percentile(values, q) <= interval.high
    ends = np.cumsum(latencies(12))
    rate = rate_interval(list(ends), float(ends[-1]) + 0.5)
    assert rate is not None and rate.low <= 12 * 60 / (ends[-1] + 0.5) <= rate.high


def test_an_interval_narrows_with_more_requests():
    def width(interval: Interval | None) -> float:
        assert interval is not None
        return interval.high - interval.low

    few, many = latencies(8), latencies(400)
    assert width(percentile_interval(many, 50)) < width(percentile_interval(few, 50)) / 2
    # A high percentile of a few requests is bounded by the largest of them: narrower still with many.
    assert width(percentile_interval(many, 90)) < width(percentile_interval(few, 90))
    few_ends, many_ends = np.cumsum(few), np.cumsum(many)
    few_rate = rate_interval(list(few_ends), float(few_ends[-1]))
    many_rate = rate_interval(list(many_ends), float(many_ends[-1]))
    assert few_rate is not None and many_rate is not None
    # Relative to the rate itself: the many requests' rate is known to a far smaller share of it.
    assert width(many_rate) / (400 * 60 / many_ends[-1]) < width(few_rate) / (8 * 60 / few_ends[-1]) / 2


def test_the_same_requests_give_the_same_interval_and_another_seed_another():
    values = latencies(20)
    assert percentile_interval(values, 90) == percentile_interval(values, 90)
    ends = list(np.cumsum(values))
    assert rate_interval(ends, ends[-1]) == rate_interval(ends, ends[-1])
    assert rate_interval(ends, ends[-1], seed=7) != rate_interval(ends, ends[-1])


def test_one_request_has_no_interval():
    assert percentile_interval([1.0], 50) is None and rate_interval([1.0], 1.0) is None
    assert CellSpread().columns() == dict.fromkeys(key for pair in INTERVAL_COLUMNS.values() for key in pair)


def samples(starts_and_ends: list[tuple[float, float]]) -> list[RequestSample]:
    return [
        RequestSample("done", "256p", created=start, finished=end, latency_s=end - start)
        for start, end in starts_and_ends
    ]


def test_a_cells_intervals_are_about_its_summary_and_go_to_its_row_and_tables():
    # A closed loop of one: each request starts as the one before ends.
    ends = np.cumsum(latencies(10))
    cell = samples(list(zip([0.0, *ends[:-1]], ends, strict=True)))
    summary, spread = summarize(cell), cell_spread(cell)
    assert spread.p50 is not None and spread.p90 is not None and spread.videos_per_min is not None
    assert spread.p50.low <= summary.latency_p50_s <= spread.p50.high
    assert spread.p90.low <= summary.latency_p90_s <= spread.p90.high
    assert spread.videos_per_min.low <= summary.throughput_per_min <= spread.videos_per_min.high
    row = {"latency_p50_s": summary.latency_p50_s, **spread.columns()}
    assert with_interval(row, "latency_p50_s") == (
        f"{summary.latency_p50_s:.2f} ({spread.p50.low:.2f}–{spread.p50.high:.2f})"
    )
    assert with_interval({"latency_p50_s": 1.5}, "latency_p50_s") == "1.50"  # none: the figure alone
    report_cell = {
        "tier": "256p",
        "guardrails": True,
        "concurrency": 1,
        "latency_p50_s": summary.latency_p50_s,
        "latency_p90_s": summary.latency_p90_s,
        "videos_per_min": summary.throughput_per_min,
        "goodput": None,
        **spread.columns(),
    }
    shown = summary_table({"cells": [report_cell]})
    assert shown["p50 s (95% interval)"].iloc[0] == with_interval(report_cell, "latency_p50_s")
    assert shown["videos/min (95% interval)"].iloc[0].startswith(f"{summary.throughput_per_min:.1f} (")
