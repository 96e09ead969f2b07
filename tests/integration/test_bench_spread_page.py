"""The page's bench of the studio's own servers (no layouts) on the embedded engine: each cell's intervals and
load in report.json, the studio's own layout named so that a plan models it (in the page's words, no command line
flag), and the last bench's view read back when the page opens after the studio started again."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from studio.backend.controller import StudioController
from studio.ui import bench_view
from tests.conftest import engine_settings
from tests.page_bench import run_page_bench

FORM = {
    "requests": 3,
    "concurrencies": "1",
    "tiers": ["256p"],
    "guardrails": ["on"],
    "aspect": "1:1",
    "frames": 5,
    "steps": 2,
    "warmup": 0,
    "slo_s": 600,
    "layouts": "",
    "variants": "",
    "prompts": "",
}
FLAG = re.compile(r"(?<![\w-])--[a-z]")


def test_a_plain_page_bench_has_intervals_and_load_plans_and_comes_back(tmp_path):
    outputs = tmp_path / "outputs"
    controller = StudioController(engine_settings(outputs_dir=outputs, poll_interval_s=0.05))
    try:
        controller.start()
        last = run_page_bench(controller, FORM)[-1]
        assert last.status.startswith("done in"), last.status
        report = json.loads(Path(last.report).read_text())
        (cell,) = report["cells"]
        assert cell["completed"] == 3
        for figure, (low, high) in {
            "latency_p50_s": ("latency_p50_low_s", "latency_p50_high_s"),
            "latency_p90_s": ("latency_p90_low_s", "latency_p90_high_s"),
            "videos_per_min": ("videos_per_min_low", "videos_per_min_high"),
        }.items():
            assert cell[low] <= cell[figure] <= cell[high], figure
        assert cell["load_samples"] >= 1 and 0 <= cell["other_cpu_percent"] <= cell["cpu_percent"] <= 100
        assert report["config"]["spread"]["confidence"] == 0.95
        # The studio's own fleet, named as a layout bench names its fleets.
        (fleet,) = report["fleets"]
        assert fleet["label"] == "1x1 base" and fleet["engine_threads"] == [1] and len(fleet["commands"]) == 1
        assert cell["layout"] == "1x1" and all(r["layout"] == "1x1" for r in report["requests"])
        assert re.search(r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)", last.summary["p50 s (95% interval)"].iloc[0])

        plan = asyncio.run(bench_view.plan_view(controller, {"rate_per_min": 1, "slo_s": 600, "attainment": 90}))
        assert "- recommended: 1x1 base, 1 CPU core" in plan.text, plan.text
        assert not FLAG.search(plan.text), plan.text

        # The studio started again: its last bench is read back from the report the page wrote.
        bench_view._last.pop(id(controller))
        bench_view._reports.pop(id(controller))
        again = bench_view.last_bench(controller)
        assert again is not None and again.report == last.report and again.status.startswith("done in")
        assert again.summary.equals(last.summary) and again.recommendation == last.recommendation
        assert bench_view._reports[id(controller)] == Path(last.report)  # a plan reads it again
    finally:
        controller.close()
        for mine in (bench_view._last, bench_view._reports, bench_view._benched):
            mine.pop(id(controller), None)
