"""`omni-studio plan` on reports it cannot plan from, and `bench --plan-rate` / `--verify-plan` asked what they cannot
do: each refused with the reason, with the usage status, before anything starts."""

from __future__ import annotations

import json

import pytest

from studio.cli import main
from studio.cli.exits import EXIT_USAGE
from tests.unit.test_plan import SERVICES, report_of


def plan(*argv: str) -> int:
    return main(["plan", *argv])


def test_a_report_too_small_to_model_is_refused_naming_the_cell_it_needs(tmp_path, capsys):
    report = report_of({"1x1": 1.0, "2x1": 1.0})
    report["requests"] = [r for r in report["requests"] if r["layout"] == "1x1" or r["sent"] < 1002]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert plan("--from", str(path), "--rate", "10", "--slo-seconds", "5") == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("omni-studio: error: too few cells to model every fleet: ")
    assert "layout 2x1 at 256p needs a cell at concurrency 1 with at least 3 requests (it has 2 done)" in err
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("not json", "is not JSON"),
        ('{"config": {}}', "is not a bench report (no cells)"),
    ],
)
def test_a_file_that_is_no_report_is_refused(tmp_path, capsys, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    assert plan("--from", str(path), "--rate", "10", "--slo-seconds", "5") == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_value_out_of_bounds_names_its_flag(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report_of({"1x1": 1.0})))
    assert plan("--from", str(path), "--rate", "0", "--slo-seconds", "5") == EXIT_USAGE
    assert "--rate must be more than 0, got 0.0" in capsys.readouterr().err
    assert plan("--from", str(path), "--rate", "10", "--slo-seconds", "5", "--attainment", "1.5") == EXIT_USAGE
    assert "--attainment must be less than 1" in capsys.readouterr().err


def test_a_plan_is_printed_and_written_beside_the_report(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report_of(SERVICES)))
    assert plan("--from", str(path), "--rate", "8", "--slo-seconds", "30", "--gpus", "2") == 0
    out = capsys.readouterr().out
    assert "recommended: 2x1 base, 2 GPUs" in out or "recommended: 1x2 base, 2 GPUs" in out
    assert "4x1 base (does not fit)" in out and "assumptions:" in out and "Poisson" in out
    assert json.loads((tmp_path / "plan.json").read_text())["inputs"]["rate_per_min"] == 8
    assert (tmp_path / "plan.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_refuses_what_a_plan_cannot_use_before_any_server_starts(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["bench", "--out", str(out), "--plan-rate", "10"]) == EXIT_USAGE
    assert "--plan-rate plans for a latency objective: give --slo-seconds too" in capsys.readouterr().err
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report_of(SERVICES)))
    assert plan("--from", str(path), "--rate", "2", "--slo-seconds", "30") == 0
    capsys.readouterr()
    planned = str(tmp_path / "plan.json")
    assert main(["bench", "--out", str(out), "--verify-plan", planned, "--tier", "480p"]) == EXIT_USAGE
    assert "--verify-plan runs the plan's tier, shape, rate and SLO; leave out --tier" in capsys.readouterr().err
    assert main(["bench", "--out", str(out), "--verify-plan", planned, "--layouts", "3x1"]) == EXIT_USAGE
    assert "the plan has no fleet 3x1 base to verify" in capsys.readouterr().err
    assert main(["bench", "--out", str(out), "--verify-plan", str(tmp_path / "none.json")]) == EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err
    assert not out.exists()
