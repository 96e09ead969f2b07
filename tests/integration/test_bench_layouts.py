"""`omni-studio bench --layouts` and `--variants` end to end on the embedded engine (real engine subprocesses on
loopback, small cells), and the page's layout bench with its "Apply this layout"."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from studio.backend.controller import StudioController
from studio.backend.servers.local_fleet import thread_shares
from studio.backend.servers.machine import cpu_cores
from studio.ui import bench_view
from studio.ui.engine_status import engine_summary
from tests.conftest import engine_settings
from tests.page_bench import layouts_form, run_page_bench
from tests.waiting import wait_for

SMALL = ["--tier", "256p", "--aspect", "1:1", "--frames", "5", "--steps", "2", "--slo-seconds", "60"]


def bench(out: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", "bench", *SMALL, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_two_layouts_are_measured_in_turn_compared_and_one_recommended(tmp_path):
    out = tmp_path / "report"
    result = bench(out, "--layouts", "1x1,2x1", "--requests", "2", "--concurrency", "1,2", "--warmup", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["layouts"] == ["1x1", "2x1"]

    one, two = report["fleets"]
    assert (one["label"], two["label"]) == ("1x1 base", "2x1 base")
    assert len(one["endpoints"]) == 1 and len(two["endpoints"]) == 2 and "error" not in one | two
    assert all(s > 0 for s in one["startup_s"] + two["startup_s"])
    # Two replicas on one CPU share its cores, as the studio's own fleet would run them; one replica has them all.
    assert one["engine_threads"] == [cpu_cores()] and one["devices"] == cpu_cores()
    assert two["engine_threads"] == list(thread_shares(cpu_cores(), 2, 1)) and two["device_kind"] == "CPU core"

    cells = report["cells"]
    assert [(c["layout"], c["variant"], c["concurrency"], c["endpoints"]) for c in cells] == [
        ("1x1", "base", 1, 1),
        ("1x1", "base", 2, 1),
        ("2x1", "base", 1, 2),
        ("2x1", "base", 2, 2),
    ]
    for c in cells:
        assert c["completed"] == 2 and c["failed"] == 0 and c["latency_p90_s"] > 0
        assert c["videos_per_min_per_device"] == pytest.approx(c["videos_per_min"] / c["devices"])
    # Each fleet's requests went to its own servers; at concurrency 2 the router used both replicas of 2x1.
    requests = report["requests"]
    assert len(requests) == 8  # warm-up requests are not in the figures
    for fleet in (one, two):
        mine = [r for r in requests if r["layout"] == fleet["layout"]]
        assert {r["endpoint"] for r in mine} <= set(fleet["endpoints"])
    both = {r["endpoint"] for r in requests if r["layout"] == "2x1" and r["concurrency"] == 2}
    assert both == set(two["endpoints"])

    with (out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["layout"], r["variant"], r["concurrency"]) for r in rows] == [
        (c["layout"], c["variant"], str(c["concurrency"])) for c in cells
    ]
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    names = {f"{c['layout']} {c['variant']} c={c['concurrency']}" for c in cells}
    assert report["pareto"]["256p"] and set(report["pareto"]["256p"]) <= names
    assert {f"{c['layout']} base c={c['concurrency']}" for c in cells if c["pareto"]} == set(report["pareto"]["256p"])

    (chosen,) = report["recommendations"]
    assert chosen["layout"] in ("1x1", "2x1") and chosen["within_slo"] and chosen["tier"] == "256p"
    best = max(cells, key=lambda c: c["videos_per_min"])  # every cell is well within 60 s here
    assert (chosen["layout"], chosen["concurrency"]) == (best["layout"], best["concurrency"])
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "recommendation:"
    assert lines[-1].strip().startswith(f"256p: layout {chosen['layout']}, variant base, at concurrency ")
    assert "The most videos/min of the 4 of 4 cells with p90 within the 60 s SLO" in lines[-1]
    # Every fleet was stopped once measured.
    for url in one["endpoints"] + two["endpoints"]:
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=2)


def test_a_variant_with_a_flag_the_engine_lacks_is_refused_before_any_server_starts(tmp_path):
    variants = tmp_path / "variants.toml"
    variants.write_text('base = ""\nteacache = "--cache-backend tea_cache"\n')
    out = tmp_path / "report"
    result = bench(out, "--layouts", "1x1,2x1", "--variants", str(variants), timeout=60)
    assert result.returncode == 2
    assert "variant 'teacache': the installed server has no flag --cache-backend" in result.stderr
    assert "python -m studio.engine --help" in result.stderr
    assert not (out / "logs").exists() and not (out / "report.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layouts", "2y1"], "layouts take REPLICASxWIDTH separated by commas"),
        (["--layouts", "1x2"], "layout 1x2: the embedded engine runs one request on several devices for Wan pipelines"),
        (["--layouts", "2x1", "--gpus", "0"], "layout 2x1: 2 replicas x 1 GPU each"),
        (
            ["--engine", "remote", "--url", "http://127.0.0.1:9", "--layouts", "1x1"],
            "layouts and variants are fleets the bench starts; the remote engine attaches",
        ),
    ],
)
def test_a_layout_that_cannot_run_is_refused_before_any_server_starts(tmp_path, args, message):
    out = tmp_path / "report"
    result = bench(out, *args, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert not (out / "logs").exists()


def test_each_variant_reaches_its_servers_and_one_that_does_not_start_is_reported(tmp_path):
    variants = tmp_path / "variants.json"
    # --max-batch 0 is a flag the engine has, with a value it refuses at start-up.
    variants.write_text(json.dumps({"base": "", "batch1": "--max-batch 1", "broken": "--max-batch 0"}))
    out = tmp_path / "report"
    result = bench(
        out, "--layouts", "1x1", "--variants", str(variants), "--requests", "1", "--concurrency", "1", "--warmup", "0"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    base, batch1, broken = report["fleets"]
    assert [f["label"] for f in report["fleets"]] == ["1x1 base", "1x1 batch1", "1x1 broken"]
    assert "--max-batch" not in base["commands"][0] and batch1["commands"][0].endswith("--max-batch 1")
    assert batch1["serve_args"] == "--max-batch 1" and "error" not in base | batch1
    assert "before it was ready" in broken["error"] and "max_batch" in broken["error"]
    # The fleets that ran are compared; the one that did not start is said, not counted.
    assert [(c["variant"], c["completed"]) for c in report["cells"]] == [("base", 1), ("batch1", 1)]
    assert report["recommendations"][0]["variant"] in ("base", "batch1")
    assert "1x1 broken: did not start" in result.stdout


def serving(controller: StudioController, timeout_s: float = 120.0) -> bool:
    """Until the studio's servers, started in the background, serve (or failed to start)."""
    wait_for(
        lambda: controller.ready() or controller.start_error is not None,
        "the studio's servers to serve (or fail to start)",
        timeout_s,
        detail=lambda: engine_summary(controller),
    )
    return controller.ready()


def test_the_page_benches_layouts_and_applies_one(tmp_path):
    controller = StudioController(engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05))
    form = layouts_form("1x1,2x1")
    try:
        controller.start()
        studio_pid = controller.fleet.server.pid
        updates = run_page_bench(controller, form)
        last = updates[-1]
        assert last.status.startswith("done in"), last.status
        assert any("stopping the studio's servers" in u.status for u in updates)
        assert any("2x1 base: starting 2 replicas" in u.status for u in updates)
        assert list(last.summary["layout"]) == ["1x1", "2x1"] and all(last.summary["completed"] == 2)
        assert any(plot.endswith("pareto.png") for plot in last.plots)
        assert "256p: layout " in last.recommendation
        assert set(last.fleets) == {"1x1 base", "2x1 base"} and last.recommended in last.fleets
        # The studio serves again as it was (one server), until a fleet is applied.
        assert serving(controller), engine_summary(controller)
        assert len(controller.fleet.pool.endpoints) == 1 and controller.settings.replicas == 1
        assert controller.fleet.server.pid != studio_pid  # stopped for the bench, started again after

        assert bench_view.benched_fleet(controller, "3x1 base") is None
        fleet = bench_view.benched_fleet(controller, "2x1 base")
        assert "2 replica(s), width 1" in bench_view.apply_question(fleet)
        assert bench_view.apply_fleet(controller, fleet).startswith("applied 2x1 base")
        assert serving(controller), engine_summary(controller)
        assert controller.settings.replicas == 2 and len(controller.fleet.pool.endpoints) == 2
    finally:
        controller.close()


def test_an_embedded_replica_two_devices_wide_runs_each_request_across_two_ranks(tmp_path):
    """Width 2 of the embedded engine: guidance split across two ranks (over gloo on this CPU), one rank per core."""
    out = tmp_path / "report"
    model = str(Path(__file__).resolve().parents[2] / "assets" / "tiny-wan")  # a Wan pipeline: it spreads
    result = bench(out, "--model", model, "--layouts", "1x1,1x2", "--requests", "2", "--concurrency", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    one, wide = report["fleets"]
    assert (wide["layout"], wide["width"], wide["devices"]) == ("1x2", 2, 2) and "error" not in wide
    assert "--cfg-parallel-size 2" in wide["commands"][0] and "--cfg-parallel-size" not in one["commands"][0]
    assert wide["engine_threads"] == [max(1, cpu_cores() // 2)]  # a share of the cores for each of its ranks
    cells = {c["layout"]: c for c in report["cells"]}
    assert cells["1x2"]["completed"] == 2 and cells["1x2"]["failed"] == 0
