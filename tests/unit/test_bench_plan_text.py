"""The plan's text says one figure: the devices it recommends are the devices it says the rate needs."""

from __future__ import annotations

import re

from studio.backend.bench.plan import devices_text, make_plan, plan_lines
from studio.backend.bench.plan_inputs import PlanInputs
from tests.unit.test_plan import SERVICES, report_of


def devices_said(line: str) -> str:
    """The first count of devices a line says: "2 CPU cores", "1 GPU"."""
    match = re.search(r"\d+ (?:CPU cores?|GPUs?)", line)
    assert match is not None, line
    return match.group(0)


def recommended_and_needed(plan) -> tuple[str, str]:
    lines = plan_lines(plan)
    (recommended,) = [line for line in lines if line.startswith("recommended: ")]
    (needs,) = [line for line in lines if line.startswith(f"{plan.inputs.rate_per_min:g} videos/min needs ")]
    return recommended, needs


def test_fewer_replicas_than_any_fleet_measured_are_what_is_recommended_and_needed():
    # Two replicas on two cores, 1 s a video: one replica's core keeps 10 videos/min within 5 s.
    plan = make_plan(report_of({"2x1": 1.0}, device_kind="CPU core"), PlanInputs(rate_per_min=10, slo_s=5))
    assert plan.choice.label == "2x1 base" and plan.choice.devices == 2 and plan.choice.reaches
    assert plan.best_need is not None and plan.best_need.devices == 1
    recommended, needs = recommended_and_needed(plan)
    assert devices_said(recommended) == devices_said(needs) == devices_text(1, "CPU core")
    # The fleet measured is said too, as what it is: more than the rate needs.
    assert "fewer than of the fleets measured: 2x1 base, 2 CPU cores" in recommended


def test_where_a_fleet_measured_is_the_fewest_its_devices_are_what_the_rate_needs():
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=8, slo_s=30, gpus=2))
    assert plan.choice.reaches and plan.choice.devices == 2
    recommended, needs = recommended_and_needed(plan)
    assert recommended.startswith(f"recommended: {plan.choice.label}, 2 GPUs")
    assert devices_said(needs) == "2 GPUs" and f"as {plan.choice.label} measured" in needs
    # Every other way to serve the rate takes at least as many.
    others = [line for line in plan_lines(plan) if line.startswith("  or ")]
    assert all(int(devices_said(line).split()[0]) >= 2 for line in others if "GPU" in line)


def test_where_no_fleet_reaches_it_the_need_is_said_alike_in_both():
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=8, slo_s=30, gpus=1))
    assert not plan.choice.reaches and plan.best_need is not None
    lines = plan_lines(plan)
    needs = next(line for line in lines if line.startswith("8 videos/min needs "))
    assert f"The rate needs {devices_said(needs)}" in lines[1]
