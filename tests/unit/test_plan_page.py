"""The Bench view's Plan: a capacity plan from the studio's last bench, as `omni-studio plan` makes it, shown as
Markdown with its plot; refusals said in the form's words."""

from __future__ import annotations

import asyncio
import json

from studio.ui import bench_view
from tests.unit.test_plan import SERVICES, report_of


class Studio:
    """What the Plan reads of a controller: its identity (each studio's last bench is its own)."""


def plan(studio: Studio, **form):
    return asyncio.run(bench_view.plan_view(studio, {"rate_per_min": 8, "slo_s": 30, "attainment": 95, **form}))


def test_without_a_bench_the_plan_says_what_it_needs():
    assert plan(Studio()).text.startswith("**no plan**: run a bench with layouts first")


def test_the_plan_of_the_last_bench_is_shown_and_written_beside_its_report(tmp_path):
    studio = Studio()
    report = tmp_path / "report.json"
    report.write_text(json.dumps(report_of(SERVICES)))
    bench_view._reports[id(studio)] = report
    try:
        shown = plan(studio, gpus=2)
        assert shown.text.startswith("**256p: 8 videos/min, 95.0% within 30 s**")
        assert "- recommended: " in shown.text and "| 4x1 base (does not fit) | 4 GPUs |" in shown.text
        assert "Assumptions:" in shown.text and "Poisson" in shown.text
        assert shown.plan == str(tmp_path / "plan.json") and shown.plot == str(tmp_path / "plan.png")
        assert json.loads((tmp_path / "plan.json").read_text())["gpus_limit"] == 2
        # The form's own words: the share is a percentage there.
        assert plan(studio, attainment=120).text == (
            "**no plan**: Within SLO must be more than 0 and less than 100 (%), got 120"
        )
        assert plan(studio, rate_per_min=0).text == "**no plan**: Rate must be more than 0, got 0"
        report.write_text(json.dumps({**report_of(SERVICES), "config": {"request_rate": 1.0}}))
        assert "this report's cells ran at a request rate" in plan(studio).text
    finally:
        bench_view._reports.pop(id(studio), None)
