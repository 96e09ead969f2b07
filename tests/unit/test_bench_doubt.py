"""A recommendation says when it is uncertain: where the winner's 95% interval overlaps the runner-up's on the
figure it was ranked by, or where the two ran under clearly different load from other work."""

from __future__ import annotations

from studio.backend.bench.cells import CellResult
from studio.backend.bench.doubt import LOAD_GAP_POINTS, doubt
from studio.backend.bench.pareto import recommend
from studio.backend.bench.runner import recommendation
from studio.backend.bench.spread import cell_spread
from studio.backend.runs.stats import RequestSample, summarize


def row(layout: str, rate: float, low: float, high: float, other_cpu: float = 5.0) -> dict:
    return {
        "layout": layout,
        "variant": "base",
        "tier": "256p",
        "guardrails": True,
        "concurrency": 1,
        "completed": 8,
        "failed": 0,
        "latency_p90_s": 60 / rate,
        "latency_p90_low_s": 60 / high,
        "latency_p90_high_s": 60 / low,
        "videos_per_min": rate,
        "videos_per_min_low": low,
        "videos_per_min_high": high,
        "videos_per_min_per_device": rate / 2,
        "device_kind": "CPU core",
        "other_cpu_percent": other_cpu,
    }


def test_well_separated_cells_give_a_sure_recommendation():
    (choice,) = recommend([row("1x1", 40.0, 35.0, 45.0), row("2x1", 190.0, 170.0, 210.0)], slo_s=None)
    assert choice.row is not None and choice.row["layout"] == "2x1"
    assert choice.uncertain is None and "uncertain" not in choice.line() and "uncertain" not in choice.as_dict()


def test_overlapping_intervals_make_it_uncertain_and_say_which():
    (choice,) = recommend([row("1x1", 40.0, 30.0, 95.0), row("2x1", 90.0, 60.0, 120.0)], slo_s=None)
    assert choice.row is not None and choice.row["layout"] == "2x1"
    assert choice.uncertain == (
        "2x1 base c=1's videos/min 95% interval (60.0–120.0) overlaps 1x1 base c=1's (30.0–95.0)"
    )
    assert choice.line().endswith(f" uncertain: {choice.uncertain}.")
    assert choice.as_dict()["uncertain"] == choice.uncertain


def test_a_clearly_different_load_makes_it_uncertain():
    separated = [row("1x1", 40.0, 35.0, 45.0, other_cpu=60.0), row("2x1", 190.0, 170.0, 210.0, other_cpu=5.0)]
    (choice,) = recommend(separated, slo_s=None)
    assert choice.uncertain == "other work used 5% of the machine's CPU during 2x1 base c=1 and 60% during 1x1 base c=1"
    # Below the threshold the loads count as the same.
    near = [row("1x1", 40.0, 35.0, 45.0, other_cpu=5.0 + LOAD_GAP_POINTS - 1), row("2x1", 190.0, 170.0, 210.0)]
    assert recommend(near, slo_s=None)[0].uncertain is None


def test_where_no_cell_meets_the_slo_the_p90_intervals_decide():
    rows = [row("1x1", 40.0, 30.0, 95.0), row("2x1", 90.0, 60.0, 120.0)]
    (choice,) = recommend(rows, slo_s=0.1)
    assert not choice.within_slo and choice.uncertain is not None and "p90 95% interval" in choice.uncertain


def test_without_intervals_or_loads_nothing_is_doubted():
    bare = {"videos_per_min": 1.0}
    assert doubt(bare, bare, "videos_per_min", ("a", "b")) is None


def cell(concurrency: int, latencies: list[float]) -> CellResult:
    """A closed-loop cell of one request at a time, its requests back to back."""
    samples, now = [], 0.0
    for latency in latencies:
        samples.append(RequestSample("done", "256p", created=now, finished=now + latency, latency_s=latency))
        now += latency
    result = CellResult("256p", True, concurrency, 1, summarize(samples), [], [])
    result.spread = cell_spread(samples)
    return result


def test_the_benchs_own_endpoints_recommendation_says_when_it_is_uncertain():
    sure = recommendation([cell(1, [1.0, 1.1, 0.9, 1.0]), cell(2, [3.0, 3.2, 2.9, 3.1])], slo_s=None)
    assert "lowest latency at concurrency 1" in sure[0] and "uncertain" not in sure[0]
    close = recommendation([cell(1, [1.0, 1.6, 0.9, 1.4]), cell(2, [1.2, 1.7, 1.1, 1.5])], slo_s=None)
    assert "(p50 1.20 s; uncertain: concurrency 1's p50 95% interval" in close[0]
    assert "overlaps concurrency 2's" in close[0]
