"""A capacity plan checked against runs on this machine: `omni-studio bench` measures layouts 1x1 and 2x1 (the default
small model, short 256p videos), `omni-studio plan` plans at a light rate and at one near what 1x1 makes at most
(where 1x1 cannot keep 95% within the SLO), and `omni-studio bench --verify-plan` runs the fleet each plan
recommends at its rate (open loop, Poisson): the plan's predicted share of requests within the SLO is within 10
points of the run's, its p90 within 25%.

The prediction compared is the one for the run's own arrival instants (the check's like-for-like figure; the plan's
steady state is beside it in the report). The plan assumes the servers as fast as in the bench: other work on this
shared machine between the bench and a run breaks that (the check's `service_ratio` and `service_ratio_thirds`, the
run's time at the server over the model's, move off 1). Such an attempt is not judged: the whole check runs once
more, and where the machine's speed moved again the test is skipped, saying so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studio.backend.bench.plan import PlanCheck, drifted
from tests.conftest import MODEL_DIR

# Short videos, one engine thread per replica: 1x1 holds one core, 2x1 both.
SHAPE = ["--tier", "256p", "--frames", "9", "--steps", "4"]
ENGINE = ["--model", str(MODEL_DIR), "--engine-threads", "1"]
VERIFY_REQUESTS = 100
ATTEMPTS = 2
# Each command has its own timeout: an attempt is the bench's and two plans' and runs' (2 to 4 minutes here).
ATTEMPT_TIMEOUT_S = 150 + 2 * (60 + 150)


def omni(*args: str, timeout: float) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "studio", *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"omni-studio {args[0]}: {result.stderr[-3000:]}"
    return result


def off_speed(check: dict) -> bool:
    """The run's servers were not as fast as the bench's, over the run or a third of it (the plan's assumption):
    other work on the machine."""
    return drifted(PlanCheck.model_validate(check))


def bench_plan_and_verify(folder: Path) -> list[tuple[str, dict]]:
    """Bench 1x1 and 2x1, then per rate a plan and a run of the fleet it recommends; each run's check. Stops after
    a run whose servers drifted from the bench's speed (the rest would be judged against a stale bench)."""
    bench = folder / "bench"
    omni(
        "bench", "--layouts", "1x1,2x1", "--concurrency", "1,2,4", "--requests", "12", *SHAPE,
        "--slo-seconds", "60", "--out", str(bench), *ENGINE, timeout=150,
    )  # fmt: skip
    report = json.loads((bench / "report.json").read_text())
    one = [c for c in report["cells"] if c["layout"] == "1x1"]
    most = max(c["videos_per_min"] for c in one)
    slo = round(2.5 * next(c for c in one if c["concurrency"] == 1)["latency_p90_s"], 2)
    checks = []
    # The run near saturation first: it is the one a change of the machine's load would move most.
    for name, rate in (("heavy", 0.75 * most), ("light", 0.3 * most)):
        planned = omni(
            "plan", "--from", str(bench / "report.json"), "--rate", f"{rate:.1f}", "--slo-seconds", str(slo),
            "--attainment", "0.95", "--out", str(folder / name), timeout=60,
        )  # fmt: skip
        plan = json.loads((folder / name / "plan.json").read_text())
        assert "recommended: " in planned.stdout and (folder / name / "plan.png").is_file()
        assert {f["label"] for f in plan["forecasts"]} == {"1x1 base", "2x1 base"}
        verified = omni(
            "bench", "--verify-plan", str(folder / name / "plan.json"), "--requests", str(VERIFY_REQUESTS),
            "--out", str(folder / f"verify-{name}"), *ENGINE, timeout=150,
        )  # fmt: skip
        assert "predicted and measured" in verified.stdout
        (check,) = json.loads((folder / f"verify-{name}" / "report.json").read_text())["verify"]["checks"]
        assert check["label"] == plan["choice"]["label"] and check["requests"] == VERIFY_REQUESTS
        assert check["rate_per_min"] == pytest.approx(rate, abs=0.1) and check["slo_s"] == slo
        checks.append((f"{name} ({rate:.0f}/min, SLO {slo} s)", check))
        if off_speed(check):
            break
    return checks


# The suite's timeout fits one attempt: a second one, after a drifted first, needs its own.
@pytest.mark.long
@pytest.mark.timeout(ATTEMPTS * ATTEMPT_TIMEOUT_S)
def test_a_plan_at_two_rates_agrees_with_runs_of_the_fleets_it_recommends(tmp_path: Path):
    attempts = []
    for attempt in range(ATTEMPTS):  # a second one only where the machine's speed moved under the first
        checks = bench_plan_and_verify(tmp_path / f"attempt-{attempt}")
        attempts.append(checks)
        if len(checks) == 2 and not any(off_speed(check) for _, check in checks):
            break
    else:
        ratios = [[[round(r, 2) for r in check["service_ratio_thirds"]] for _, check in checks] for checks in attempts]
        pytest.skip(
            f"the servers' speed moved between the bench and the runs in every attempt (time at the server over "
            f"the model's, by thirds of each run: {ratios}): other work on this machine; no plan can be judged "
            "against it"
        )
    for name, check in checks:
        assert abs(check["predicted_attainment"] - check["measured_attainment"]) <= 0.10, f"{name}: {check}"
        assert check["predicted_p90_s"] == pytest.approx(check["measured_p90_s"], rel=0.25), f"{name}: {check}"
