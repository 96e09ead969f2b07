"""Which fleet a tier should run: the Pareto set of p90 vs throughput per device, and the recommendation."""

import pytest

from studio.backend.bench.pareto import pareto_front, recommend


def cell(layout, concurrency, per_min, p90, tier="256p", variant="base", failed=0, devices=4, guardrails=True):
    return {
        "layout": layout,
        "variant": variant,
        "tier": tier,
        "guardrails": guardrails,
        "concurrency": concurrency,
        "completed": 8 - failed,
        "failed": failed,
        "videos_per_min": per_min,
        "videos_per_min_per_device": per_min / devices,
        "latency_p90_s": p90,
        "device_kind": "GPU",
    }


ROWS = [
    cell("1x4", 1, 4.0, 15.0),  # fastest
    cell("1x4", 4, 5.0, 48.0),  # beaten by 2x2 c=4
    cell("2x2", 4, 6.0, 30.0),
    cell("4x1", 4, 8.0, 55.0),  # most videos, slowest
    cell("4x1", 8, 7.5, 90.0),  # beaten by 4x1 c=4 on both counts
]


def test_the_pareto_set_is_every_cell_no_other_beats_on_both_counts():
    front = pareto_front(ROWS)
    assert [(r["layout"], r["concurrency"]) for r in front] == [("1x4", 1), ("2x2", 4), ("4x1", 4)]
    # A tie on both counts beats neither.
    twins = [cell("1x4", 1, 4.0, 10.0), cell("2x2", 1, 4.0, 10.0)]
    assert len(pareto_front(twins)) == 2
    assert pareto_front([{**ROWS[0], "completed": 0, "latency_p90_s": None}]) == []


def test_the_most_videos_within_the_slo_is_recommended_and_says_why():
    (choice,) = recommend(ROWS, slo_s=50.0)
    assert choice.within_slo and (choice.row["layout"], choice.row["concurrency"]) == ("2x2", 4)
    assert "The most videos/min of the 3 of 5 cells with p90 within the 50 s SLO" in choice.why
    assert "Next: 1x4 base c=4, 5.00 videos/min, p90 48.00 s." in choice.why
    line = choice.line()
    assert line.startswith(
        "256p: layout 2x2, variant base, at concurrency 4: 6.00 videos/min, 1.50 per GPU, p90 30.00 s"
    )
    assert choice.as_dict() | {"why": None} == {
        "tier": "256p",
        "layout": "2x2",
        "replicas": None,
        "width": None,
        "variant": "base",
        "concurrency": 4,
        "videos_per_min": 6.0,
        "videos_per_min_per_device": 1.5,
        "latency_p90_s": 30.0,
        "within_slo": True,
        "why": None,
    }


def test_without_an_slo_the_most_videos_win():
    (choice,) = recommend(ROWS, slo_s=None)
    assert choice.row["layout"] == "4x1" and choice.row["concurrency"] == 4 and "no SLO given" in choice.why


def test_a_cell_with_failed_requests_does_not_meet_the_slo():
    rows = [cell("4x1", 4, 9.0, 10.0, failed=2), cell("1x4", 1, 4.0, 15.0)]
    (choice,) = recommend(rows, slo_s=20.0)
    assert choice.row["layout"] == "1x4"


def test_where_no_cell_meets_the_slo_the_lowest_p90_is_recommended():
    (choice,) = recommend(ROWS, slo_s=5.0)
    assert not choice.within_slo and choice.row["layout"] == "1x4" and choice.row["concurrency"] == 1
    assert choice.why.startswith("No cell keeps p90 within the 5 s SLO with every request done")
    assert "Next: 2x2 base c=4" in choice.why


@pytest.mark.parametrize("slo_s", [None, 40.0])
def test_each_tier_and_guardrails_setting_gets_its_own(slo_s):
    rows = [*ROWS, cell("2x2", 1, 2.0, 35.0, tier="720p"), cell("1x4", 1, 1.0, 80.0, guardrails=False)]
    choices = recommend(rows, slo_s)
    assert [c.group for c in choices] == ["256p", "720p", "256p guardrails off"]
    assert choices[1].row["layout"] == "2x2"
    nothing = recommend([{**ROWS[0], "completed": 0, "latency_p90_s": None}], slo_s)
    assert nothing[0].row is None and nothing[0].line() == "256p: no cell completed a request"
