"""`omni-studio bench` end to end on the embedded engine: report files, figures, recommendation."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest


def test_bench_writes_reports_and_recommends(tmp_path):
    out = tmp_path / "report"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "studio",
            "bench",
            "--requests",
            "3",
            "--concurrency",
            "1,3",
            "--tier",
            "256p",
            "--aspect",
            "1:1",
            "--frames",
            "5",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--slo-seconds",
            "60",
            "--engine-threads",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert [cell["concurrency"] for cell in report["cells"]] == [1, 3]
    for cell in report["cells"]:
        assert cell["completed"] == 3 and cell["failed"] == 0 and cell["goodput"] == 1.0
        assert cell["latency_p50_s"] <= cell["latency_p90_s"] <= cell["latency_max_s"]
        # How sure each figure is (95% bootstrap intervals) and what the machine did meanwhile.
        assert cell["latency_p50_low_s"] <= cell["latency_p50_s"] <= cell["latency_p50_high_s"]
        assert cell["latency_p90_low_s"] <= cell["latency_p90_s"] <= cell["latency_p90_high_s"]
        assert cell["videos_per_min_low"] <= cell["videos_per_min"] <= cell["videos_per_min_high"]
        assert cell["load_samples"] >= 1 and 0 <= cell["other_cpu_percent"] <= cell["cpu_percent"] <= 100
        assert cell["request_throughput"] > 0 and cell["median_e2el_ms"] == pytest.approx(cell["latency_p50_s"] * 1000)
    assert len(report["requests"]) == 6  # warm-up requests are not in the figures
    with (out / "summary.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 2
    for name in ("latency_vs_concurrency.png", "throughput_vs_concurrency.png", "request_timeline.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert report["config"]["spread"] == {
        "confidence": 0.95,
        "resamples": 2000,
        "seed": 0,
        "method": "bootstrap percentile",
    }
    first = report["cells"][0]
    shown = f"{first['latency_p50_s']:.2f} ({first['latency_p50_low_s']:.2f}–{first['latency_p50_high_s']:.2f})"
    assert shown in result.stdout  # the table's p50 with its interval
    lines = result.stdout.strip().splitlines()
    # One fleet (--replicas 1 of the embedded engine): the recommendation names it and its concurrency.
    assert lines[-2] == "recommendation:" and lines[-1].strip().startswith("256p: layout 1x1, variant base, at ")
    assert "with p90 within the 60 s SLO" in lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "from 1 to 256"),
        (["--tier", "999p"], "unknown tier"),
        (["--guardrails", "maybe"], "on,off"),
        (["--frames", "1000"], "frames must be between"),
    ],
)
def test_bench_rejects_bad_arguments(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "studio", "bench", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and message in result.stderr
