"""A capacity plan from a bench report: for this much traffic at this latency objective, which fleet to run and how
many GPUs it takes (`omni-studio plan`, `bench --plan-rate`, the page's Bench view).

Each fleet the bench measured is fitted (plan_model.py) and simulated (plan_sim.py) under Poisson arrivals at the
rate asked, as the studio would drive it: its in-flight slots, the router's least-busy choice, each server's queue
and batches. Per fleet that fits the GPUs given: p50, p90 and the share of requests within the SLO (attainment),
and the largest rate it sustains at the attainment asked (bisection over the rate). The plan recommends the fleet
of fewest GPUs that reaches the attainment, else the one that comes nearest, and says how many replicas of the best
width the rate needs (beyond the replicas measured, extrapolated, and said so).

`bench --verify-plan plan.json` runs a planned fleet at the plan's rate (the bench's open loop) and puts the
figures side by side (check_plan).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from studio.backend.bench.config import MAX_BENCH_REQUESTS
from studio.backend.bench.plan_inputs import PlanInputs
from studio.backend.bench.plan_model import FleetModel, PlanError, fleet_models, report_workload
from studio.backend.bench.plan_sim import STEADY_REQUESTS, STEADY_WARMUP, SimFleet, pooled, runs_of, steady_state
from studio.backend.runs.fair_share import SLOTS_PER_SERVER

PLAN_FILE = "plan.json"
PLAN_PLOT = "plan.png"
MAX_REPLICAS = 1024  # the most replicas the plan extrapolates to
CURVE_POINTS = 10  # rates per fleet on the plot
CURVE_REQUESTS = 4000  # simulated requests per point of the plot (the decisions use plan_sim.STEADY_REQUESTS)
RATE_PRECISION = 0.02  # the capacity's bisection stops within 2% of the rate
# A verification run: enough requests that its attainment is known within 2 points (one standard error) at the
# attainment asked, and its p90 has 10 requests above it.
VERIFY_ERROR = 0.02
VERIFY_MIN_REQUESTS = 100
# A verification whose servers took this much longer or less per request than the model says so.
SERVICE_DRIFT = 0.1


class Forecast(BaseModel):
    """One fleet at the rate asked, as the simulation has it."""

    label: str
    layout: str
    variant: str
    replicas: int
    devices: int
    device_kind: str
    fits: bool = Field(description="within the GPUs given")
    slots_per_server: int
    p50_s: float
    p90_s: float
    attainment: float
    reaches: bool = Field(description="its attainment is at least the one asked")
    max_rate_per_min: float = Field(description="the largest rate it sustains within the SLO at the attainment")


class Choice(BaseModel):
    """The fleet to run, and why."""

    label: str | None
    layout: str | None = None
    variant: str | None = None
    devices: int | None = None
    reaches: bool = False
    why: str


class Need(BaseModel):
    """How many replicas of one width (and variant) the rate takes."""

    width: int
    variant: str
    from_label: str = Field(description="the measured fleet whose replicas are counted")
    measured_replicas: int
    replicas: int | None = Field(description="None: no number of replicas reaches the attainment")
    devices: int | None
    device_kind: str
    attainment: float | None = None
    p90_s: float | None = None
    extrapolated: bool = False
    why: str = ""


class Curve(BaseModel):
    label: str
    rates_per_min: list[float]
    attainment: list[float]


class CapacityPlan(BaseModel):
    """plan.json: what was asked, of which report, under which assumptions; the fitted fleets, their forecasts, the
    choice and the GPUs the rate needs."""

    source: str | None = Field(default=None, description="the report planned from")
    inputs: PlanInputs
    tier: str
    guardrails: bool
    gpus_limit: int | None = Field(description="GPUs the fleets were held to (None: every fleet of the report)")
    device_kind: str
    bench: dict[str, Any] = Field(description="how the report's videos were made: a verification makes the same")
    assumptions: list[str]
    models: list[FleetModel]
    forecasts: list[Forecast]
    choice: Choice
    needs: list[Need]
    best_need: Need | None
    curves: list[Curve]
    verify_requests: int = Field(description="requests a verification run sends by default")

    def forecast(self, label: str) -> Forecast | None:
        return next((f for f in self.forecasts if f.label == label), None)

    def model(self, label: str) -> FleetModel | None:
        return next((m for m in self.models if m.label == label), None)


def devices_text(count: float | None, kind: str) -> str:
    """A count of devices in words: 2 GPUs, 1 CPU core."""
    if count is None:
        return f"no number of {kind}s"
    word = kind if count == 1 else f"{kind}s"
    return f"{count:g} {word}"


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def slots_per_server(inputs: PlanInputs, report: Mapping[str, Any], replicas: int) -> int:
    """The studio's in-flight slots per server for a fleet of `replicas`: as asked, else as the bench's studio had
    them (a total over its servers), else the studio's default."""
    if inputs.slots_per_server:
        return inputs.slots_per_server
    total = (report.get("config") or {}).get("in_flight_slots")
    return max(1, math.ceil(total / replicas)) if total else SLOTS_PER_SERVER


def max_rate_per_s(fleet: SimFleet, slo_s: float, target: float, seed: int = 0) -> float:
    """The largest Poisson rate at which the fleet keeps `target` of its requests within `slo_s` (steady state):
    bisection over the rate, with the same draws at every rate. 0 where even a lone request misses it."""

    def reaches(rate: float) -> bool:
        return steady_state(fleet, rate, seed).attainment(slo_s) >= target

    fastest = min([1.0, *(factor for _, factor in fleet.slowdown)])
    ceiling = fleet.replicas * fleet.max_batch / (fleet.service_mean_s * fastest)  # the servers never idle
    low, high = ceiling * 1e-3, ceiling * 1.25
    if not reaches(low):
        return 0.0
    while reaches(high) and high < ceiling * 1e3:
        low, high = high, high * 2
    while (high - low) > RATE_PRECISION * high:
        middle = (low + high) / 2
        low, high = (middle, high) if reaches(middle) else (low, middle)
    return low


def _need(model: FleetModel, inputs: PlanInputs, report: Mapping[str, Any]) -> Need:
    """The fewest replicas of this fleet's kind that keep the attainment at the rate asked."""
    rate = inputs.rate_per_min / 60.0
    cache: dict[int, Any] = {}

    def result(replicas: int):
        if replicas not in cache:
            slots = slots_per_server(inputs, report, replicas) * replicas
            cache[replicas] = steady_state(model.sim(replicas, slots), rate, inputs.seed)
        return cache[replicas]

    def reaches(replicas: int) -> bool:
        return result(replicas).attainment(inputs.slo_s) >= inputs.attainment

    common = {
        "width": model.width,
        "variant": model.variant,
        "from_label": model.label,
        "measured_replicas": model.replicas,
        "device_kind": model.device_kind,
    }
    # A lone request's figures: where they miss the objective, no number of replicas meets it.
    alone = steady_state(model.sim(1, None), rate * 1e-4, inputs.seed)
    if alone.attainment(inputs.slo_s) < inputs.attainment:
        why = (
            f"a request alone on {model.label}'s replicas is within {inputs.slo_s:g} s only "
            f"{_pct(alone.attainment(inputs.slo_s))} of the time (p90 {alone.percentile(90):.2f} s)"
        )
        return Need(**common, replicas=None, devices=None, why=why)
    fastest = min([1.0, *(factor for _, factor in model.slowdown())])
    high = max(1, math.ceil(rate * model.service_mean_s * fastest / model.max_batch))
    while not reaches(high):
        if high >= MAX_REPLICAS:
            return Need(**common, replicas=None, devices=None, why=f"not within {MAX_REPLICAS} replicas")
        high = min(MAX_REPLICAS, high * 2)
    low = high // 2  # does not reach (or is 0)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    found = result(high)
    return Need(
        **common,
        replicas=high,
        devices=math.ceil(high * model.devices_per_replica),
        attainment=found.attainment(inputs.slo_s),
        p90_s=found.percentile(90),
        extrapolated=high > model.replicas,
    )


def _choice(forecasts: Sequence[Forecast], inputs: PlanInputs, scope: str, best_need: Need | None) -> Choice:
    """`scope`: which fleets compete, in words ("within 4 GPUs", "of the report")."""
    fitting = [f for f in forecasts if f.fits]
    rate = f"{inputs.rate_per_min:g} videos/min"
    target = _pct(inputs.attainment)
    if not fitting:
        return Choice(label=None, why=f"no fleet of the report fits: none is {scope}")

    def figures(f: Forecast) -> str:
        return (
            f"{f.label}, {devices_text(f.devices, f.device_kind)}: {_pct(f.attainment)} within {inputs.slo_s:g} s, "
            f"p50 {f.p50_s:.2f} s, p90 {f.p90_s:.2f} s"
        )

    reaching = [f for f in fitting if f.reaches]
    if reaching:
        best = min(reaching, key=lambda f: (f.devices, -f.attainment, f.p90_s))
        others = sorted((f for f in reaching if f is not best), key=lambda f: (f.devices, -f.attainment))
        why = (
            f"{figures(best)} at {rate}: the fewest {best.device_kind}s of the {len(reaching)} of {len(fitting)} "
            f"fleets {scope} that keep {target} of requests within the SLO"
        )
        why += f"; next: {figures(others[0])}." if others else "."
        return Choice(
            label=best.label, layout=best.layout, variant=best.variant, devices=best.devices, reaches=True, why=why
        )
    best = max(fitting, key=lambda f: (f.attainment, -f.p90_s, -f.devices))
    why = f"No fleet {scope} keeps {target} of requests within {inputs.slo_s:g} s at {rate}; nearest: {figures(best)}."
    if best_need is not None and best_need.replicas is not None:
        why += f" The rate needs {need_line(best_need)}."
    return Choice(label=best.label, layout=best.layout, variant=best.variant, devices=best.devices, why=why)


def _answer(
    choice: Choice, best_need: Need | None, models: Sequence[FleetModel], forecasts: Sequence[Forecast]
) -> Need | None:
    """The one figure the plan's text says: the fewest devices that keep the attainment at the rate. Where a
    measured fleet reaches it with no more devices than any count of replicas would, that is the chosen fleet as
    measured, and the rate's need is said as it; else the need stands (fewer replicas than any fleet measured, or
    none measured reaches it), and plan_lines recommends it."""
    if not choice.reaches or choice.label is None:
        return best_need
    if best_need is not None and best_need.devices is not None and best_need.devices < (choice.devices or 0):
        return best_need
    model = next(m for m in models if m.label == choice.label)
    forecast = next(f for f in forecasts if f.label == choice.label)
    return Need(
        width=model.width,
        variant=model.variant,
        from_label=model.label,
        measured_replicas=model.replicas,
        replicas=model.replicas,
        devices=forecast.devices,
        device_kind=forecast.device_kind,
        attainment=forecast.attainment,
        p90_s=forecast.p90_s,
    )


def fewer_than_measured(plan: CapacityPlan) -> bool:
    """The rate needs fewer devices than the fleet chosen of those measured: the plan recommends that count."""
    need, choice = plan.best_need, plan.choice
    return (
        choice.reaches
        and need is not None
        and need.devices is not None
        and choice.devices is not None
        and need.devices < choice.devices
    )


def need_line(need: Need) -> str:
    if need.replicas is None:
        return f"width {need.width} ({need.variant}): {need.why}"
    extra = f", extrapolated beyond the {need.measured_replicas} measured" if need.extrapolated else ""
    return (
        f"{devices_text(need.devices, need.device_kind)}: {need.replicas} replica{'s' * (need.replicas != 1)} of width "
        f"{need.width} ({need.variant}, as {need.from_label} measured{extra}), {_pct(need.attainment or 0)} within "
        f"the SLO, p90 {need.p90_s:.2f} s"
    )


def _curve(model: FleetModel, fleet: SimFleet, top_per_s: float, inputs: PlanInputs) -> Curve:
    rates = np.linspace(top_per_s / CURVE_POINTS, top_per_s, CURVE_POINTS)
    attained = [
        steady_state(fleet, float(rate), inputs.seed, requests=CURVE_REQUESTS).attainment(inputs.slo_s)
        for rate in rates
    ]
    return Curve(label=model.label, rates_per_min=[float(r) * 60 for r in rates], attainment=attained)


def verify_requests(attainment: float) -> int:
    """Requests a verification run needs: its attainment known within VERIFY_ERROR at the one asked, and at least
    VERIFY_MIN_REQUESTS."""
    needed = math.ceil(attainment * (1 - attainment) / VERIFY_ERROR**2)
    return min(MAX_BENCH_REQUESTS, max(VERIFY_MIN_REQUESTS, needed))


def _assumptions(plan_bench: Mapping[str, Any], tier: str, slots: str, sim_requests: int) -> list[str]:
    shape = ", ".join(
        f"{value} {name}"
        for name, value in (("frames", plan_bench.get("frames")), ("steps", plan_bench.get("steps")))
        if value is not None
    )
    return [
        "Arrivals are Poisson at the rate asked (as the bench's open loop sends them, at a request rate).",
        f"One tier at a time: every request is a {tier} {plan_bench.get('aspect', '')} video as the bench made them"
        + (f" ({shape})." if shape else " (the engine's default frames and steps)."),
        "Service times are as the bench measured them on its machine, with their spread; other work on that "
        "machine at the time is in them.",
        "A request goes slower while more of the replicas compute (where the server batches: the larger its batch), "
        "as the bench's closed-loop cells showed, held flat beyond the highest concurrency measured; the server's "
        "handover between two jobs and the studio's own time per request (sending, download, the mp4's check) are "
        "as measured. Where the embedded engine batches, a request waits for partners of its shape as the "
        "engine's batch wait (batch_wait_ms) says (a tenth of it when the engine is idle), so requests sent "
        "together share a batch.",
        f"The studio sends at most {slots} at once; the rest wait in it, and the router gives each request "
        "to the replica with the fewest outstanding.",
        "More replicas than measured serve as the measured ones did, at the same load per replica (extrapolated).",
        f"Figures are of the steady state: {sim_requests} simulated requests, the first "
        f"{STEADY_WARMUP:.0%} left out; a short run from an empty fleet waits less.",
    ]


def machine_gpu_limit(models: Sequence[FleetModel]) -> int | None:
    """The GPUs of this machine, where the report's fleets ran on GPUs and it has some; else None (every fleet)."""
    if not any(m.device_kind == "GPU" for m in models):
        return None
    from studio.backend.servers.machine import gpus_found

    return len(gpus_found()) or None


def make_plan(report: Mapping[str, Any], inputs: PlanInputs, source: str | None = None) -> CapacityPlan:
    """The plan for `inputs` from a bench report (report.json as a dict). PlanError where the report cannot model a
    fleet, naming the cells it needs. Without `inputs.gpus`, the fleets that fit this machine's GPUs compete (every
    fleet, where the report's ran on CPUs or this machine has no GPU)."""
    tier, guardrails, notes = report_workload(report, inputs.tier)
    models = fleet_models(report, tier, guardrails, inputs.seed)
    kind = models[0].device_kind
    gpus = inputs.gpus if inputs.gpus is not None else machine_gpu_limit(models)
    if inputs.gpus:
        scope = f"within {devices_text(gpus, kind)}"
    else:
        scope = f"within this machine's {devices_text(gpus, kind)}" if gpus else "of the report"
    rate = inputs.rate_per_min / 60.0
    forecasts, fleets = [], {}
    for model in models:
        per_server = slots_per_server(inputs, report, model.replicas)
        fleet = model.sim(slots=per_server * model.replicas)
        fleets[model.label] = fleet
        result = steady_state(fleet, rate, inputs.seed)
        attained = result.attainment(inputs.slo_s)
        forecasts.append(
            Forecast(
                label=model.label,
                layout=model.layout,
                variant=model.variant,
                replicas=model.replicas,
                devices=model.devices,
                device_kind=model.device_kind,
                fits=gpus is None or model.devices <= gpus,
                slots_per_server=per_server,
                p50_s=result.percentile(50),
                p90_s=result.percentile(90),
                attainment=attained,
                reaches=attained >= inputs.attainment,
                max_rate_per_min=max_rate_per_s(fleet, inputs.slo_s, inputs.attainment, inputs.seed) * 60.0,
            )
        )
    # Each measured fleet is a measure of its width's replicas: the rate counted in replicas of each.
    needs = [_need(model, inputs, report) for model in models]
    met = [n for n in needs if n.replicas is not None]
    # Fewest devices; at a tie, a count within what was measured before an extrapolated one.
    best_need = (
        min(met, key=lambda n: (n.devices, n.extrapolated, n.replicas)) if met else (needs[0] if needs else None)
    )
    choice = _choice(forecasts, inputs, scope, best_need)
    best_need = _answer(choice, best_need, models, forecasts)
    top = 1.25 * max([rate, *(f.max_rate_per_min / 60.0 for f in forecasts)])
    curves = [_curve(model, fleets[model.label], top, inputs) for model in models]
    bench = {
        key: (report.get("config") or {}).get(key)
        for key in ("engine", "model", "aspect", "frames", "steps", "prompts", "seed", "warmup", "in_flight_slots")
    }
    slots = {f.slots_per_server for f in forecasts}
    slots_text = f"{next(iter(slots))} requests per server" if len(slots) == 1 else "its in-flight slots per server"
    assumptions = _assumptions(bench, tier, slots_text, STEADY_REQUESTS) + [f"Planned for {note}." for note in notes]
    return CapacityPlan(
        source=source,
        inputs=inputs,
        tier=tier,
        guardrails=guardrails,
        gpus_limit=gpus,
        device_kind=kind,
        bench=bench,
        assumptions=assumptions,
        models=models,
        forecasts=forecasts,
        choice=choice,
        needs=needs,
        best_need=best_need,
        curves=curves,
        verify_requests=verify_requests(inputs.attainment),
    )


def plan_lines(plan: CapacityPlan) -> list[str]:
    """The plan in a few lines: the recommendation, each fleet's capacity, the GPUs the rate needs."""
    inputs = plan.inputs
    head = f"{plan.tier}: {inputs.rate_per_min:g} videos/min, {_pct(inputs.attainment)} within {inputs.slo_s:g} s"
    if fewer_than_measured(plan):
        assert plan.best_need is not None
        chosen = f"of the fleets measured: {plan.choice.why}"
        lines = [head, f"recommended: {need_line(plan.best_need)}; fewer than {chosen}"]
    else:
        lines = [head, f"recommended: {plan.choice.why}" if plan.choice.label else plan.choice.why]
    for f in plan.forecasts:
        lines.append(
            f"{f.label} sustains up to {f.max_rate_per_min:.1f} videos/min within the SLO at {_pct(inputs.attainment)}"
            + ("" if f.fits else f" (does not fit {devices_text(plan.gpus_limit, f.device_kind)})")
        )
    if plan.best_need is not None:
        lines.append(f"{inputs.rate_per_min:g} videos/min needs {need_line(plan.best_need)}")
    for need in plan.needs:
        if need != plan.best_need:
            lines.append(f"  or {need_line(need)}")
    return lines


def read_report(path: Path) -> dict[str, Any]:
    """A bench's report.json; PlanError where it cannot be read as one."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(report, dict) or "cells" not in report:
        raise PlanError(f"{path} is not a bench report (no cells): give the report.json of omni-studio bench")
    return report


def load_plan(path: Path) -> CapacityPlan:
    """A plan.json; PlanError where it cannot be read as one."""
    try:
        return CapacityPlan.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise PlanError(f"{path} is not a plan of omni-studio plan: {exc.errors()[0]['msg']}") from None


# ---- a plan checked against a run ----------------------------------------------------------------------------


class PlanCheck(BaseModel):
    """One planned fleet run at the plan's rate: what the plan said, what the run measured."""

    label: str
    rate_per_min: float
    slo_s: float
    requests: int
    completed: int
    failed: int
    predicted_attainment: float = Field(description="for this run's arrivals, from an empty fleet")
    predicted_p90_s: float
    # What 8 of 10 simulated runs with these arrivals show (their 10th to 90th percentiles): the run's own spread.
    predicted_attainment_range: tuple[float, float]
    predicted_p90_range_s: tuple[float, float]
    steady_attainment: float = Field(description="the plan's own figure: the steady state")
    steady_p90_s: float
    measured_attainment: float
    measured_p90_s: float | None
    # The run's time at the server per request over the model's for these arrivals: 1 where the servers were as
    # fast as in the bench; other work on the machine, or another machine, moves it.
    service_ratio: float | None = None
    # The same over the run's first, middle and last third (by arrival): other work that starts or stops during the
    # run moves one third and not the others.
    service_ratio_thirds: list[float] = Field(default_factory=list)
    # The prediction again, with the model's service times scaled by service_ratio: what the plan would have said
    # of this run had it known the servers' speed during it. It tells the queueing model's error from the machine's.
    at_run_speed_attainment: float | None = None
    at_run_speed_p90_s: float | None = None

    @property
    def attainment_gap_points(self) -> float:
        return (self.predicted_attainment - self.measured_attainment) * 100

    @property
    def p90_ratio(self) -> float | None:
        return self.predicted_p90_s / self.measured_p90_s if self.measured_p90_s else None


class PlanVerification(BaseModel):
    plan: str | None
    checks: list[PlanCheck]
    notes: list[str] = Field(default_factory=list)


def verify_labels(plan: CapacityPlan, layouts: Sequence[str] | None) -> list[str]:
    """The planned fleets a verification runs: the recommended one, or the `layouts` given (of the recommended
    fleet's variant). PlanError naming a layout the plan does not hold."""
    if not layouts:
        if plan.choice.label is None:
            raise PlanError(f"the plan recommends no fleet ({plan.choice.why}): name one with --layouts")
        return [plan.choice.label]
    variant = plan.choice.variant or plan.models[0].variant
    labels = []
    for layout in layouts:
        label = f"{layout} {variant}"
        if plan.model(label) is None:
            held = ", ".join(m.layout for m in plan.models if m.variant == variant)
            raise PlanError(f"the plan has no fleet {label} to verify (it has {held})")
        labels.append(label)
    return labels


def verify_config(plan: CapacityPlan, labels: Sequence[str], requests: int | None, seed: int | None) -> dict[str, Any]:
    """The bench form of a verification: the planned fleets, at the plan's rate (open loop), tier and shape, with
    the studio's in-flight slots, warm-up and prompts as the bench had them."""
    models = [plan.model(label) for label in labels]
    first = models[0]
    assert first is not None
    slots = plan.forecast(first.label)
    bench = plan.bench
    values: dict[str, Any] = {
        "requests": requests or plan.verify_requests,
        "concurrencies": [1],
        "tiers": [plan.tier],
        "guardrails": [plan.guardrails],
        "request_rate": plan.inputs.rate_per_min / 60.0,
        "slo_s": plan.inputs.slo_s,
        "layouts": [m.layout for m in models if m is not None],
        "slots_per_server": slots.slots_per_server if slots else SLOTS_PER_SERVER,
    }
    if first.variant != "base" or first.variant_args:
        values["variants"] = {first.variant: first.variant_args}
    for key in ("aspect", "frames", "steps", "prompts", "warmup"):
        if bench.get(key) is not None:
            values[key] = bench[key]
    if seed is not None or bench.get("seed") is not None:
        values["seed"] = seed if seed is not None else bench["seed"]
    return values


def check_plan(plan: CapacityPlan, report: Mapping[str, Any], source: str | None = None) -> PlanVerification:
    """The verification run's figures (its report) beside the plan's, per fleet run. The prediction is for the
    run's own arrival instants (its Poisson draws), from an empty fleet, over many draws of the service times; the
    plan's steady-state figure stands beside it. Latency counts from each request's arrival, its wait in the studio
    included, as the plan's do; a request not done misses the SLO."""
    slo = plan.inputs.slo_s
    rate = plan.inputs.rate_per_min / 60.0
    checks = []
    for record in report.get("fleets") or []:
        label = record.get("label")
        model = plan.model(label) if label else None
        forecast = plan.forecast(label) if label else None
        if model is None or forecast is None or record.get("error"):
            continue
        rows = [r for r in report.get("requests") or [] if r.get("layout") == model.layout]
        rows = [r for r in rows if r.get("variant") == model.variant]
        if not rows:
            continue
        rows = sorted(rows, key=lambda r: float(r["created"]))
        latencies = np.array([r["total_s"] for r in rows if r.get("state") == "done" and r.get("total_s") is not None])
        served = [r["inference_s"] for r in rows if r.get("state") == "done" and r.get("inference_s") is not None]
        fleet = model.sim(slots=forecast.slots_per_server * model.replicas)
        created = np.array([float(r["created"]) for r in rows])
        runs = runs_of(fleet, len(rows), arrivals_s=created - created[0], seed=plan.inputs.seed)
        like = pooled(runs)
        thirds = _thirds_ratio(rows, np.mean([run.service_s for run in runs], axis=0))
        attained = [run.attainment(slo) for run in runs]
        p90s = [run.percentile(90) for run in runs]
        steady = steady_state(fleet, rate, plan.inputs.seed)
        ratio = float(np.mean(served) / np.mean(like.service_s)) if served else None
        rescaled = None
        if ratio is not None:
            faster = dataclasses.replace(fleet, service_mean_s=fleet.service_mean_s * ratio)
            rescaled = pooled(runs_of(faster, len(rows), arrivals_s=created - created[0], seed=plan.inputs.seed))
        checks.append(
            PlanCheck(
                label=model.label,
                rate_per_min=plan.inputs.rate_per_min,
                slo_s=slo,
                requests=len(rows),
                completed=len(latencies),
                failed=len(rows) - len(latencies),
                predicted_attainment=like.attainment(slo),
                predicted_p90_s=like.percentile(90),
                predicted_attainment_range=(float(np.percentile(attained, 10)), float(np.percentile(attained, 90))),
                predicted_p90_range_s=(float(np.percentile(p90s, 10)), float(np.percentile(p90s, 90))),
                steady_attainment=steady.attainment(slo),
                steady_p90_s=steady.percentile(90),
                measured_attainment=float(np.sum(latencies <= slo)) / len(rows),
                measured_p90_s=float(np.percentile(latencies, 90)) if len(latencies) else None,
                service_ratio=ratio,
                service_ratio_thirds=thirds,
                at_run_speed_attainment=None if rescaled is None else rescaled.attainment(slo),
                at_run_speed_p90_s=None if rescaled is None else rescaled.percentile(90),
            )
        )
    return PlanVerification(plan=source, checks=checks)


def _thirds_ratio(rows: Sequence[Mapping[str, Any]], predicted: np.ndarray) -> list[float]:
    """The measured time at the server over the predicted one, request by request in arrival order, in thirds."""
    measured = np.array([np.nan if r.get("inference_s") is None else float(r["inference_s"]) for r in rows])
    ratios = []
    for part in np.array_split(np.arange(len(rows)), 3):
        known = part[~np.isnan(measured[part])]
        if len(known):
            ratios.append(float(np.mean(measured[known]) / np.mean(predicted[known])))
    return ratios


def drifted(check: PlanCheck) -> bool:
    """The run's servers were not as fast as the plan's model of the bench has them, over the run or a third of it
    (by more than SERVICE_DRIFT): its figures say how the machine changed, not how good the plan is."""
    ratios = [check.service_ratio, *check.service_ratio_thirds]
    return any(ratio is None or abs(ratio - 1) > SERVICE_DRIFT for ratio in ratios)


def check_lines(verification: PlanVerification) -> list[str]:
    """Each check in a line: predicted against measured."""
    lines = []
    for c in verification.checks:
        measured_p90 = f"{c.measured_p90_s:.2f} s" if c.measured_p90_s is not None else "none done"
        low, high = c.predicted_attainment_range
        p90_low, p90_high = c.predicted_p90_range_s
        lines.append(
            f"{c.label} at {c.rate_per_min:g} videos/min, {c.requests} requests: within {c.slo_s:g} s predicted "
            f"{_pct(c.predicted_attainment)} ({_pct(low)} to {_pct(high)}), measured {_pct(c.measured_attainment)}; "
            f"p90 predicted {c.predicted_p90_s:.2f} s ({p90_low:.2f} to {p90_high:.2f}), measured {measured_p90} "
            f"(steady state: {_pct(c.steady_attainment)}, p90 {c.steady_p90_s:.2f} s)"
        )
        if c.service_ratio is not None and drifted(c):
            thirds = ", ".join(f"{ratio:.2f}" for ratio in c.service_ratio_thirds)
            lines.append(
                f"  note: its requests' time at the server was {c.service_ratio:.2f} times what the plan's model of "
                f"the bench has (by thirds of the run: {thirds}): the plan assumes the bench's service times, and "
                "other work on the machine (or another machine) changes them; at this run's speed it would say "
                f"{_pct(c.at_run_speed_attainment or 0)} within the SLO, p90 {c.at_run_speed_p90_s or 0:.2f} s"
            )
    return lines
