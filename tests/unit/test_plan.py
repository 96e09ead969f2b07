"""The capacity plan: the fleet simulation against queueing formulas, the model fitted to a bench's cells, the
choice of fleet, the refusals, and the capacity's bisection."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

from studio.backend.bench import plan as plan_module
from studio.backend.bench.plan import (
    CapacityPlan,
    PlanInputs,
    check_lines,
    check_plan,
    drifted,
    load_plan,
    make_plan,
    max_rate_per_s,
    verify_config,
    verify_labels,
    verify_requests,
)
from studio.backend.bench.plan_model import PlanError, fleet_models
from studio.backend.bench.plan_plot import write_plan
from studio.backend.bench.plan_sim import SimFleet, simulate, steady_state

# ---- the simulation against the formulas -------------------------------------------------------------------------


def test_a_single_server_with_exponential_service_waits_as_m_m_1_says():
    arrival, service = 0.6, 1.0  # per second: utilisation 0.6
    result = steady_state(SimFleet(replicas=1, service_mean_s=1 / service, service_cv=1.0), arrival, requests=80_000)
    gap = service - arrival
    for q in (50, 90, 95):
        # Time in the system is exponential with rate mu - lambda; the wait is 0 with probability 1 - rho, and
        # beyond that exponential too: P(W > t) = rho exp(-(mu - lambda) t).
        assert result.percentile(q) == pytest.approx(-math.log(1 - q / 100) / gap, rel=0.06)
        assert float(np.percentile(result.wait_s, q)) == pytest.approx(
            math.log(arrival / service / (1 - q / 100)) / gap, rel=0.08
        )
    assert float(np.mean(result.wait_s == 0)) == pytest.approx(1 - arrival / service, abs=0.02)


def test_general_service_waits_as_pollaczek_khinchine_says():
    arrival, mean, cv = 0.7, 1.0, 0.5
    result = steady_state(SimFleet(replicas=1, service_mean_s=mean, service_cv=cv), arrival, requests=80_000)
    rho = arrival * mean
    expected = arrival * mean**2 * (1 + cv**2) / (2 * (1 - rho))
    assert float(np.mean(result.wait_s)) == pytest.approx(expected, rel=0.08)


def test_one_slot_per_server_makes_one_queue_for_two_servers_as_erlang_c_says():
    # The studio holds what the slots do not let through; the router gives each to the idle server: M/M/2.
    arrival, service, servers = 1.4, 1.0, 2
    fleet = SimFleet(replicas=servers, service_mean_s=1 / service, service_cv=1.0, slots=servers)
    result = steady_state(fleet, arrival, requests=80_000)
    a = arrival / service
    rho = a / servers
    tail = a**servers / math.factorial(servers) / (1 - rho)
    erlang_c = tail / (sum(a**k / math.factorial(k) for k in range(servers)) + tail)
    assert float(np.mean(result.wait_s > 0)) == pytest.approx(erlang_c, abs=0.02)
    # P(W > t) = C exp(-(c mu - lambda) t): its 90th percentile.
    assert float(np.percentile(result.wait_s, 90)) == pytest.approx(
        math.log(erlang_c / 0.1) / (servers * service - arrival), rel=0.08
    )


def test_a_closed_loop_keeps_the_server_busy_and_a_batch_serves_several_at_once():
    alone = SimFleet(replicas=1, service_mean_s=0.5, post_s=0.1)
    assert simulate(alone, 50, concurrency=1).latency_s == pytest.approx(np.full(50, 0.6))
    assert simulate(alone, 50, concurrency=1).videos_per_s == pytest.approx(1 / 0.6)
    # Two in flight: the server never idles, a video every 0.5 s.
    assert simulate(alone, 200, concurrency=2).videos_per_s == pytest.approx(2.0, rel=0.01)
    # A batch of 4 takes twice one request's time: twice the throughput of one at a time, once 4 wait.
    batching = SimFleet(replicas=1, service_mean_s=0.5, max_batch=4, slowdown=((1.0, 1.0), (4.0, 2.0)))
    assert simulate(batching, 400, concurrency=8).videos_per_s == pytest.approx(4.0, rel=0.01)
    assert simulate(batching, 400, concurrency=1).videos_per_s == pytest.approx(2.0)


def test_requests_sent_together_make_one_batch_where_the_server_waits_for_partners():
    # Two clients in a closed loop, the second's POST a little later than the first's (as on any machine).
    fleet = SimFleet(
        replicas=1, service_mean_s=0.5, pre_s=0.005, overhead_cv=0.5, max_batch=2, slowdown=((1.0, 1.0), (2.0, 1.6))
    )
    # Taking the first at once, the server never sees the two together: each batch is one request, 0.5 s.
    alone = simulate(fleet, 100, concurrency=2, seed=3)
    assert alone.service_s == pytest.approx(np.full(100, 0.5))
    # Waiting 20 ms for a partner (the embedded engine's batch wait when idle, a tenth of its 200 ms), they go as one
    # batch of two, 0.8 s, and the pair is done sooner than one after the other.
    gathering = dataclasses.replace(fleet, gather_s=0.02, gather_busy_s=0.2)
    together = simulate(gathering, 100, concurrency=2, seed=3)
    assert together.service_s == pytest.approx(np.full(100, 0.8))
    assert together.videos_per_s > alone.videos_per_s * 1.2
    # A request alone waits its 20 ms and goes by itself; one that came while a batch ran, whose wait ended before
    # that batch, goes as soon as the server is free.
    direct = dataclasses.replace(gathering, pre_s=0.0)  # (the wait counts from the arrival, the POST in it)
    single = simulate(direct, 1, rate_per_s=1.0)
    assert single.wait_s[0] == pytest.approx(0.02) and single.service_s[0] == pytest.approx(0.5)
    queued = simulate(direct, 2, arrivals_s=[0.0, 0.1])
    assert queued.wait_s == pytest.approx([0.02, 0.42])  # the second starts as the first's batch ends, at 0.52 s
    with pytest.raises(ValueError, match="cannot be negative"):
        SimFleet(replicas=1, service_mean_s=1.0, gather_s=-1.0)


def test_the_engines_batch_wait_is_read_from_its_command_and_no_other_servers():
    from studio.backend.bench.plan_model import engine_batch_wait_s

    engine = "/usr/bin/python3 -m studio.engine --model M --port 9000"
    assert engine_batch_wait_s({"commands": [engine]}) == pytest.approx(0.2)  # the engine's default, 200 ms
    assert engine_batch_wait_s({"commands": [engine + " --batch-wait-ms 50"]}) == pytest.approx(0.05)
    assert engine_batch_wait_s({"commands": [engine + " --batch-wait-ms=0"]}) == 0.0
    assert engine_batch_wait_s({"commands": ["vllm serve M --omni --port 9000"]}) == 0.0
    assert engine_batch_wait_s({}) == 0.0


def test_the_fit_of_a_gpu_bench_gives_each_batch_size_the_time_its_batches_took():
    """The embedded engine on one H200 (benchmarks/gpu_runs, Wan2.1-1.3B's shape at 256p): its closed-loop cells at
    concurrency 2 and 4 ran batches of 2 and 4. The fitted slowdown at each batch size must be what those batches
    took over one request alone, as the server reported their inference times."""
    import json
    from pathlib import Path

    runs = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runs"
    report = json.loads((runs / "plan_check_bench_gpu-2026-12-03.json").read_text())
    (model,) = fleet_models(report, "256p", True)
    assert model.max_batch == 4 and model.gather_s == pytest.approx(0.02) and model.gather_busy_s == pytest.approx(0.2)
    inference = {c: np.mean([r["inference_s"] for r in report["requests"] if r["concurrency"] == c]) for c in (1, 2, 4)}
    fitted = {p.concurrency: p.factor for p in model.load_points}
    for concurrency in (2, 4):
        assert fitted[concurrency] == pytest.approx(inference[concurrency] / inference[1], rel=0.1)
    assert not model.notes  # no factor held at a bound


def test_the_router_gives_each_request_to_the_least_busy_replica_ties_to_the_first():
    fleet = SimFleet(replicas=3, service_mean_s=1.0)
    # Far apart, every request finds all three idle: the first takes each, none waits.
    result = simulate(fleet, 30, rate_per_s=0.01, seed=1)
    assert float(np.max(result.wait_s)) == 0.0
    # Three at once: one each.
    assert simulate(fleet, 3, concurrency=3).latency_s == pytest.approx(np.ones(3))


def test_a_simulation_is_seeded_and_fast():
    fleet = SimFleet(replicas=4, service_mean_s=0.3, service_cv=0.3, pre_s=0.01, post_s=0.02, slots=32)
    started = time.perf_counter()
    first = steady_state(fleet, 10.0, seed=3)
    assert time.perf_counter() - started < 1.0
    assert np.array_equal(first.latency_s, steady_state(fleet, 10.0, seed=3).latency_s)
    assert not np.array_equal(first.latency_s, steady_state(fleet, 10.0, seed=4).latency_s)


# ---- a bench report, made up ---------------------------------------------------------------------------------------


def requests_of(layout, concurrency, latencies, services, tier="256p", variant="base", state="done", gap=1.0):
    rows = []
    for index, (latency, service) in enumerate(zip(latencies, services, strict=True)):
        sent = 1000.0 + index * gap
        rows.append(
            {
                "layout": layout,
                "variant": variant,
                "tier": tier,
                "guardrails": True,
                "concurrency": concurrency,
                "state": state,
                "created": sent,
                "sent": sent,
                "accepted": sent + 0.01,
                "latency_s": latency,
                "total_s": latency,
                "inference_s": service,
            }
        )
    return rows


def fleet_record(layout, device_kind="GPU", variant="base"):
    replicas, width = (int(part) for part in layout.split("x"))
    return {
        "label": f"{layout} {variant}",
        "layout": layout,
        "replicas": replicas,
        "width": width,
        "variant": variant,
        "variant_args": "",
        "engine_threads": [None] * replicas,
        "devices": replicas * width,
        "device_kind": device_kind,
    }


def report_of(services: dict[str, float], count: int = 8, device_kind: str = "GPU", overhead: float = 0.5) -> dict:
    """A bench of concurrency-1 cells: each layout's requests take about `services[layout]` s at the server."""
    rng = np.random.default_rng(0)
    fleets, cells, requests = [], [], []
    for layout, service in services.items():
        times = service * rng.uniform(0.95, 1.05, count)
        requests += requests_of(layout, 1, list(times + overhead), list(times))
        fleets.append(fleet_record(layout, device_kind))
        cells.append(
            {
                "layout": layout,
                "variant": "base",
                "tier": "256p",
                "guardrails": True,
                "concurrency": 1,
                "completed": count,
                "videos_per_min": 60 / (service + overhead),
            }
        )
    config = {"request_rate": None, "aspect": "16:9", "frames": 33, "steps": 8, "seed": 0, "warmup": 1}
    return {"config": {**config, "engine": "embedded"}, "fleets": fleets, "cells": cells, "requests": requests}


# 1x1 is one GPU, 2x1 and 1x2 two, 4x1 four; 1x2's replica (one request on two GPUs) is the fastest.
SERVICES = {"1x1": 10.0, "2x1": 10.0, "1x2": 6.0, "4x1": 10.0}


def test_the_fleet_of_fewest_gpus_that_reaches_the_attainment_is_recommended():
    report = report_of(SERVICES)
    # 2 videos/min: one replica is 1/3 busy and keeps 95% within 30 s; 1x1 is the cheapest that does.
    light = make_plan(report, PlanInputs(rate_per_min=2, slo_s=30))
    assert light.choice.label == "1x1 base" and light.choice.reaches and light.choice.devices == 1
    assert "the fewest GPUs of the 4 of 4 fleets of the report" in light.choice.why
    # 8 videos/min: one replica of 10 s makes 6 a minute at most; of the two-GPU fleets, the one that keeps more
    # within the SLO wins the tie.
    busy = make_plan(report, PlanInputs(rate_per_min=8, slo_s=30))
    one = busy.forecast("1x1 base")
    assert one is not None and not one.reaches and one.attainment < 0.5
    assert busy.choice.devices == 2 and busy.choice.reaches
    two = [f for f in busy.forecasts if f.devices == 2]
    assert busy.choice.label == max(two, key=lambda f: f.attainment).label
    # Held to one GPU, nothing reaches it: the nearest is said, with the GPUs the rate needs.
    held = make_plan(report, PlanInputs(rate_per_min=8, slo_s=30, gpus=1))
    assert [f.label for f in held.forecasts if f.fits] == ["1x1 base"]
    assert held.choice.label == "1x1 base" and not held.choice.reaches
    assert "No fleet within 1 GPU keeps 95.0% of requests within 30 s at 8 videos/min" in held.choice.why
    assert "The rate needs 2 GPUs" in held.choice.why


def test_the_gpus_the_rate_needs_are_counted_in_replicas_and_said_extrapolated():
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=30, slo_s=30))
    # 30 videos/min of 10 s each keeps 5 GPUs busy; with the queue's spread, 6 or more replicas of width 1.
    one_wide = [n for n in plan.needs if n.width == 1]
    assert {n.from_label for n in one_wide} == {"1x1 base", "2x1 base", "4x1 base"}
    for need in one_wide:
        assert need.replicas is not None and need.replicas >= 6 and need.extrapolated
        assert need.devices == need.replicas and need.attainment >= 0.95
    best = plan.best_need
    assert best is not None and best.devices == min(n.devices for n in plan.needs if n.devices)
    line = plan_module.need_line(best)
    assert f"extrapolated beyond the {best.measured_replicas} measured" in line
    # A need within what was measured is not extrapolated.
    light = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=1, slo_s=30))
    assert all(not n.extrapolated for n in light.needs if n.from_label == "4x1 base")


def test_without_gpus_given_the_fleets_that_fit_this_machines_gpus_compete(monkeypatch):
    import studio.backend.servers.machine as machine

    monkeypatch.setattr(machine, "gpus_found", lambda: ["0", "1"])
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=8, slo_s=30))
    assert plan.gpus_limit == 2 and [f.label for f in plan.forecasts if not f.fits] == ["4x1 base"]
    # A bench on CPUs is planned with every fleet, whatever this machine has.
    cpu = make_plan(report_of({"1x1": 1.0, "2x1": 1.0}, device_kind="CPU core"), PlanInputs(rate_per_min=8, slo_s=5))
    assert cpu.gpus_limit is None and all(f.fits for f in cpu.forecasts)


def test_a_layout_with_too_few_requests_alone_is_refused_naming_the_cell_it_needs():
    report = report_of({"1x1": 1.0, "2x1": 1.0})
    report["requests"] = [r for r in report["requests"] if r["layout"] == "1x1" or r["sent"] < 1002]
    with pytest.raises(PlanError) as refused:
        make_plan(report, PlanInputs(rate_per_min=10, slo_s=5))
    assert str(refused.value) == (
        "too few cells to model every fleet: layout 2x1 at 256p needs a cell at concurrency 1 with at least 3 "
        "requests (it has 2 done)"
    )
    report["requests"] = [r for r in report["requests"] if r["layout"] == "1x1"]
    report["fleets"].append(fleet_record("4x1", variant="teacache"))
    with pytest.raises(PlanError, match=r"layout 2x1 at 256p needs .* \(it has none\); layout 4x1 variant teacache"):
        make_plan(report, PlanInputs(rate_per_min=10, slo_s=5))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("fleets"), "this report measured servers that ran already (--url)"),
        (lambda r: r["config"].update(request_rate=0.5), "this report's cells ran at a request rate"),
        (lambda r: r.update(cells=[]), "the report has no cells"),
        (lambda r: r["fleets"][0].update(error="did not start"), "too few cells"),
    ],
)
def test_a_report_the_plan_cannot_model_is_refused_with_the_reason(change, message):
    report = report_of({"1x1": 1.0, "2x1": 1.0})
    report["requests"] = [r for r in report["requests"] if r["layout"] == "1x1"]  # 2x1 has none alone
    change(report)
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_plan(report, PlanInputs(rate_per_min=10, slo_s=5))


def test_an_unknown_tier_is_refused_and_the_tier_asked_is_planned():
    report = report_of({"1x1": 1.0})
    with pytest.raises(PlanError, match=r"no cells at tier 480p \(it has 256p\)"):
        make_plan(report, PlanInputs(rate_per_min=10, slo_s=5, tier="480p"))
    assert make_plan(report, PlanInputs(rate_per_min=10, slo_s=5, tier="256p")).tier == "256p"


def test_the_fit_finds_the_slowdown_a_closed_loop_cell_shows():
    # Cells made by the simulation itself: 2 replicas that go 1.5x slower while both compute.
    report = report_of({"2x1": 1.0}, count=12, overhead=0.2)
    (model,) = fleet_models(report, "256p", True)
    slower = dataclasses.replace(model.sim(), slowdown=((0.5, 1.0), (1.0, 1.5)))
    for concurrency in (2, 4):
        latencies = simulate(slower, 12, concurrency=concurrency, seed=concurrency).latency_s
        report["requests"] += requests_of("2x1", concurrency, list(latencies), [1.5] * 12)
        report["cells"].append({**report["cells"][0], "concurrency": concurrency, "videos_per_min": 60 / 1.5})
    (fitted,) = fleet_models(report, "256p", True)
    assert [(p.concurrency, p.load) for p in fitted.load_points] == [(1, 0.5), (2, 1.0), (4, 1.0)]
    assert [p.factor for p in fitted.load_points[1:]] == pytest.approx([1.5, 1.5], rel=0.1)
    assert fitted.max_batch == 1 and fitted.slowdown()[0] == (0.5, 1.0)
    # On one replica every cell keeps it busy: one load, the cells' factors averaged by their requests.
    single = fitted.model_copy(
        update={"replicas": 1, "load_points": [p.model_copy(update={"load": 1.0}) for p in fitted.load_points]}
    )
    ((load, factor),) = single.slowdown()
    assert load == 1.0 and factor == pytest.approx(np.mean([p.factor for p in fitted.load_points]))


def test_a_request_slows_while_another_replica_computes_and_speeds_up_when_it_ends():
    # Two replicas that go twice as slow while both compute: a 1 s request alone; a second starting 0.5 s later.
    fleet = SimFleet(replicas=2, service_mean_s=1.0, slowdown=((0.5, 1.0), (1.0, 2.0)))
    result = simulate(fleet, 2, arrivals_s=[0.0, 0.5])
    # The first: 0.5 s alone (half its work), then both at half pace: its other half takes 1 s, ending at 1.5 s;
    # the second has done half of its work by then and finishes alone 0.5 s later, at 2 s.
    assert result.latency_s == pytest.approx([1.5, 1.5])
    assert result.service_s == pytest.approx([1.5, 1.5])
    apart = simulate(fleet, 2, arrivals_s=[0.0, 1.0])  # never both at once: each at full pace
    assert apart.latency_s == pytest.approx([1.0, 1.0])


def test_the_capacity_grows_with_the_slo_and_the_replicas_and_attainment_falls_with_the_rate():
    fleet = SimFleet(replicas=1, service_mean_s=1.0, service_cv=0.3, post_s=0.1, slots=8)
    rates = [max_rate_per_s(fleet, slo, 0.9) for slo in (1.5, 3.0, 6.0)]
    assert 0 < rates[0] < rates[1] < rates[2] < 1.0  # never beyond one video a second
    wider = max_rate_per_s(dataclasses.replace(fleet, replicas=2, slots=16), 3.0, 0.9)
    assert wider > 1.5 * rates[1]
    # At the capacity found the attainment holds; a little beyond it, it does not.
    assert steady_state(fleet, rates[1]).attainment(3.0) >= 0.9
    assert steady_state(fleet, rates[1] * 1.03).attainment(3.0) < 0.9
    # An SLO below a lone request's time: no rate keeps it.
    assert max_rate_per_s(fleet, 0.5, 0.9) == 0.0
    plan = make_plan(report_of({"1x1": 10.0}), PlanInputs(rate_per_min=3, slo_s=30))
    (curve,) = plan.curves
    assert all(a >= b - 0.01 for a, b in zip(curve.attainment, curve.attainment[1:], strict=False))


def test_the_plan_says_its_assumptions_and_round_trips_through_plan_json(tmp_path):
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=8, slo_s=30), source="report.json")
    text = " ".join(plan.assumptions)
    for words in ("Poisson", "One tier at a time", "as the bench measured them on its machine", "extrapolated"):
        assert words in text
    path, plot = write_plan(plan, tmp_path)
    assert load_plan(path) == plan and plot.read_bytes()[:4] == b"\x89PNG"
    assert isinstance(CapacityPlan.model_validate_json(path.read_text()), CapacityPlan)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PlanError, match="is not a plan of omni-studio plan"):
        load_plan(tmp_path / "bad.json")


def test_a_verification_runs_the_plans_fleet_at_its_rate_and_compares_like_with_like():
    plan = make_plan(report_of(SERVICES), PlanInputs(rate_per_min=2, slo_s=30, attainment=0.9))
    assert verify_labels(plan, None) == ["1x1 base"]
    assert verify_labels(plan, ["1x1", "4x1"]) == ["1x1 base", "4x1 base"]
    with pytest.raises(PlanError, match=r"no fleet 3x1 base to verify \(it has 1x1, 2x1, 1x2, 4x1\)"):
        verify_labels(plan, ["3x1"])
    values = verify_config(plan, ["1x1 base"], None, None)
    assert values["request_rate"] == pytest.approx(2 / 60) and values["slo_s"] == 30 and values["layouts"] == ["1x1"]
    assert values["requests"] == plan.verify_requests == verify_requests(0.9) == 225
    assert values["slots_per_server"] == 8 and (values["frames"], values["steps"]) == (33, 8)
    assert verify_requests(0.5) == 625 and verify_requests(0.99) == 100

    # A run of 20 arriving 30 s apart: 18 on time, one late, one failed.
    latencies = [11.0] * 18 + [45.0]
    run = requests_of("1x1", 1, [*latencies, None], [*[10.0] * 19, None], gap=30.0)
    run[-1]["state"] = "failed"
    report = {"fleets": [fleet_record("1x1")], "requests": run}
    (check,) = check_plan(plan, report).checks
    assert (check.requests, check.completed, check.failed) == (20, 19, 1)
    assert check.measured_attainment == pytest.approx(0.9)
    assert check.measured_p90_s == pytest.approx(float(np.percentile(latencies, 90)))
    assert check.predicted_attainment > 0.9 and check.steady_attainment > 0.9
    low, high = check.predicted_attainment_range
    assert low <= check.predicted_attainment <= high
    # Its servers were as fast as the bench's (10 s a video): nothing drifted. Slower in its last third: it did.
    assert check.service_ratio == pytest.approx(1.0, abs=0.05) and len(check.service_ratio_thirds) == 3
    assert not drifted(check)
    for row in run[14:]:
        row["inference_s"] = 15.0
    (slower,) = check_plan(plan, report).checks
    assert slower.service_ratio_thirds[-1] == pytest.approx(1.5, rel=0.05) and drifted(slower)
    assert "by thirds of the run" in " ".join(check_lines(check_plan(plan, report)))


def test_the_plot_draws_each_fleet_in_the_bench_figures_colours_and_sizes():
    from matplotlib.colors import to_hex

    from studio.backend.bench.pareto_plot import FLEET_COLORS, LEGEND_SIZE
    from studio.backend.bench.plan_plot import plan_figure

    plan = make_plan(report_of({"1x1": 10.0, "2x1": 10.0}), PlanInputs(rate_per_min=4, slo_s=30))
    ax = plan_figure(plan).axes[0]
    lines = [line for line in ax.get_lines() if line.get_label().startswith(("1x1", "2x1"))]
    assert [to_hex(line.get_color()) for line in lines] == [color.lower() for color in FLEET_COLORS[:2]]
    assert any("(recommended)" in line.get_label() for line in lines)
    assert {text.get_fontsize() for text in ax.get_legend().get_texts()} == {LEGEND_SIZE}
    assert ax.get_xlabel() == "arrivals, videos / min (Poisson)"
