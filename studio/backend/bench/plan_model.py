"""Each fleet of a bench report as a service model the plan simulates (plan_sim.py): fitted to the cells it measured.

Per fleet (layout x variant) at one tier:

- **service time alone**: from the requests of its concurrency-1 cell, each one's time at the server making the
  video (`inference_s` of the report's records: the server's own figure, tightened by the studio's polls; the whole
  latency where a server tells none), with its spread (the coefficient of variation of every cell's requests about
  their cell's mean: a gamma distribution of that mean and spread);
- **the studio's overhead**: the rest of those requests' latency (the POST before, the download, the mp4's check,
  its sidecar and history row after), which holds the request's slot but not the server;
- **the server's handover**: in the closed-loop cells where requests queue, the time between one job's end and the
  start of the next one waiting (the median: the server's own bookkeeping), which holds the server but is in no
  request's inference time;
- **batching**: the most requests a replica served at once, on average, in any cell (throughput x service time per
  replica, by Little's law): 1 where the engine runs one at a time (the embedded engine on a CPU); where it batches,
  the embedded engine's wait for a batch's partners (`--batch-wait-ms` as its command gave it, else its default; a
  tenth of it when the engine was idle), which makes requests sent together one batch;
- **how service time grows with load**: for each closed-loop cell at concurrency c, the factor by which its requests'
  times at the server must grow for the simulated closed loop of c to show the cell's mean latency, placed at the
  cell's load: the share of replicas busy (min(c, replicas) of them), or the batch size where the server batches
  (c per replica, up to the batch). Cells at one load (1x1 at concurrency 1, 2 and 4: its one replica busy) are
  averaged, weighted by their requests. On a CPU this is the cores shared by the replicas and the studio; on a GPU
  it is how much longer a batch of k takes than one request.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from studio.backend.bench.plan_sim import SimFleet, pooled, runs_of
from studio.config import EngineSettings

# The fewest requests of a concurrency-1 cell that give a service time and its spread.
MIN_REQUESTS = 3
# The bounds of a fitted slowdown factor: beyond them the cell's figures are not the fleet's (noise, failures).
FACTOR_BOUNDS = (0.2, 20.0)
# Simulated requests per fit of one cell (in runs of the cell's own length).
FIT_REQUESTS = 1500
FIT_STEPS = 18


class PlanError(ValueError):
    """A report the plan cannot model, said in one line that names what it needs."""


class LoadPoint(BaseModel):
    """One closed-loop cell, as the model reads it."""

    concurrency: int
    load: float = Field(description="the share of replicas busy (the batch size where the server batches)")
    factor: float = Field(description="time at the server over the time alone")
    latency_mean_s: float = Field(description="the cell's mean latency (sent to the mp4 on disk)")
    requests: int


class FleetModel(BaseModel):
    """One fleet of the report, fitted: what the simulation runs for it."""

    model_config = ConfigDict(frozen=True)

    label: str
    layout: str
    variant: str
    variant_args: str = ""
    replicas: int
    width: int
    devices: int = Field(description="GPUs, or CPU cores on a CPU, the fleet held")
    device_kind: str
    tier: str
    guardrails: bool
    engine_threads: list[int | None] = Field(default_factory=list)
    requests: int = Field(description="requests of the concurrency-1 cell the service time comes from")
    service_mean_s: float
    service_cv: float
    service_p90_s: float
    pre_s: float = Field(description="the studio's time before the server had the request, mean")
    post_s: float = Field(description="the studio's time after the server was done with it, mean")
    overhead_cv: float
    handover_s: float = Field(default=0.0, description="the server's time between a job's end and the next's start")
    max_batch: int
    gather_s: float = Field(default=0.0, description="the server's wait for a batch's partners when it was idle")
    gather_busy_s: float = Field(default=0.0, description="the same when it was computing as the request came")
    load_points: list[LoadPoint]
    notes: list[str] = Field(default_factory=list)

    @property
    def devices_per_replica(self) -> float:
        return self.devices / self.replicas

    def slowdown(self) -> tuple[tuple[float, float], ...]:
        """(load, factor) for the simulation: the cells at one load averaged, weighted by their requests."""
        loads = sorted({p.load for p in self.load_points})
        curve = []
        for load in loads:
            points = [p for p in self.load_points if p.load == load]
            factor = float(np.average([p.factor for p in points], weights=[p.requests for p in points]))
            curve.append((load, factor))
        return tuple(curve)

    def sim(self, replicas: int | None = None, slots: int | None = None) -> SimFleet:
        """The fleet for the simulation, with `replicas` of its replicas (default: as measured) and `slots` in-flight
        slots in all (default: no limit)."""
        return SimFleet(
            replicas=replicas or self.replicas,
            service_mean_s=self.service_mean_s,
            service_cv=self.service_cv,
            pre_s=self.pre_s,
            post_s=self.post_s,
            overhead_cv=self.overhead_cv,
            handover_s=self.handover_s,
            max_batch=self.max_batch,
            slowdown=self.slowdown(),
            slots=slots,
            gather_s=self.gather_s,
            gather_busy_s=self.gather_busy_s,
        )


def _cv(values: np.ndarray) -> float:
    mean = float(np.mean(values))
    return float(np.std(values, ddof=1) / mean) if len(values) > 1 and mean > 0 else 0.0


def _done(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r.get("state") == "done" and r.get("latency_s") is not None]


def _service(row: Mapping[str, Any]) -> float:
    """A request's time at the server making its video (its whole latency where the server tells none)."""
    inference = row.get("inference_s")
    return float(inference if inference is not None else row["latency_s"])


def _fleet_name(layout: str, variant: str) -> str:
    return f"layout {layout}" + ("" if variant == "base" else f" variant {variant}")


def report_workload(report: Mapping[str, Any], tier: str | None) -> tuple[str, bool, list[str]]:
    """The tier and guardrails setting the plan models (one at a time), and what it says about the choice.
    Raises PlanError where the report cannot be planned from."""
    if "fleets" not in report:
        raise PlanError(
            "the plan models the fleets a bench starts (--layouts, or --replicas); this report measured servers "
            "that ran already (--url)"
        )
    if (report.get("config") or {}).get("request_rate"):
        raise PlanError(
            "the plan models closed-loop cells (--concurrency); this report's cells ran at a request rate: bench "
            "again without --request-rate"
        )
    cells = report.get("cells") or []
    tiers = list(dict.fromkeys(c["tier"] for c in cells))
    if not tiers:
        raise PlanError("the report has no cells: no fleet of its bench started")
    notes = []
    if tier is None:
        tier = tiers[0]
        if len(tiers) > 1:
            notes.append(f"tier {tier} of {', '.join(tiers)}, one tier at a time")
    elif tier not in tiers:
        raise PlanError(f"the report has no cells at tier {tier} (it has {', '.join(tiers)})")
    settings = list(dict.fromkeys(bool(c.get("guardrails", True)) for c in cells if c["tier"] == tier))
    guardrails = True if True in settings else settings[0]
    if len(settings) > 1:
        notes.append("guardrails on (the report has cells with them off too)")
    return tier, guardrails, notes


def fleet_models(report: Mapping[str, Any], tier: str, guardrails: bool, seed: int = 0) -> list[FleetModel]:
    """Every fleet of the report that started, fitted at this tier; PlanError naming every cell missing (a fleet
    needs a concurrency-1 cell with at least MIN_REQUESTS requests done)."""
    records = [f for f in report.get("fleets") or [] if not f.get("error")]
    if not records:
        raise PlanError("no fleet of the report's bench started: nothing to model")
    missing, fitted = [], []
    for record in records:
        layout, variant = str(record["layout"]), str(record["variant"])

        def mine(row: Mapping[str, Any], layout: str = layout, variant: str = variant) -> bool:
            return (
                row.get("layout") == layout
                and row.get("variant") == variant
                and row.get("tier") == tier
                and bool(row.get("guardrails", True)) == guardrails
            )

        requests = [r for r in report.get("requests") or [] if mine(r)]
        alone = _done([r for r in requests if r.get("concurrency") == 1])
        if len(alone) < MIN_REQUESTS:
            have = f"it has {len(alone)} done" if any(r.get("concurrency") == 1 for r in requests) else "it has none"
            missing.append(
                f"{_fleet_name(layout, variant)} at {tier} needs a cell at concurrency 1 with at least "
                f"{MIN_REQUESTS} requests ({have})"
            )
            continue
        cells = [c for c in report.get("cells") or [] if mine(c)]
        fitted.append(_fit(record, tier, guardrails, alone, requests, cells, seed))
    if missing:
        raise PlanError("too few cells to model every fleet: " + "; ".join(missing))
    return fitted


def _fit(
    record: Mapping[str, Any],
    tier: str,
    guardrails: bool,
    alone: list[Mapping[str, Any]],
    requests: list[Mapping[str, Any]],
    cells: list[Mapping[str, Any]],
    seed: int,
) -> FleetModel:
    replicas = int(record["replicas"])
    service = np.array([_service(r) for r in alone])
    latency = np.array([float(r["latency_s"]) for r in alone])
    overhead = np.clip(latency - service, 0.0, None)
    sent_to_accepted = np.array(
        [max(0.0, r["accepted"] - r["sent"]) if r.get("accepted") and r.get("sent") else 0.0 for r in alone]
    )
    pre = np.minimum(sent_to_accepted, overhead)
    notes = []
    if all(r.get("inference_s") is None for r in alone):
        notes.append("the server tells no inference time: its whole latency counts as service")

    # Batching: the most requests one replica served at once, on average, in any cell. The spread: every cell's
    # requests about their cell's mean (more of them than one cell has).
    in_service, relative = [], []
    for cell in cells:
        times = np.array(
            [_service(r) for r in _done([r for r in requests if r.get("concurrency") == cell["concurrency"]])]
        )
        if len(times) and cell.get("videos_per_min"):
            in_service.append(cell["videos_per_min"] / 60.0 * float(np.mean(times)) / replicas)
        if len(times) >= MIN_REQUESTS and float(np.mean(times)) > 0:
            relative.extend(times / float(np.mean(times)))
    max_batch = max(1, round(max(in_service, default=1.0)))
    handover = _handover([r for r in requests if r.get("concurrency", 1) > 1])
    batch_wait = engine_batch_wait_s(record) if max_batch > 1 else 0.0

    base = FleetModel(
        label=str(record.get("label") or f"{record['layout']} {record['variant']}"),
        layout=str(record["layout"]),
        variant=str(record["variant"]),
        variant_args=str(record.get("variant_args") or ""),
        replicas=replicas,
        width=int(record["width"]),
        devices=int(record.get("devices") or replicas * int(record["width"])),
        device_kind=str(record.get("device_kind") or "GPU"),
        tier=tier,
        guardrails=guardrails,
        engine_threads=list(record.get("engine_threads") or []),
        requests=len(alone),
        service_mean_s=float(np.mean(service)),
        service_cv=float(np.std(relative, ddof=1)) if len(relative) > 1 else _cv(service),
        service_p90_s=float(np.percentile(service, 90)),
        pre_s=float(np.mean(pre)),
        post_s=float(np.mean(overhead - pre)),
        overhead_cv=_cv(overhead) if float(np.mean(overhead)) > 0 else 0.0,
        handover_s=handover,
        max_batch=max_batch,
        gather_s=batch_wait / 10,  # as studio.engine.jobs waits when no other job runs or finishes
        gather_busy_s=batch_wait,
        load_points=[
            LoadPoint(
                concurrency=1,
                load=_load(1, replicas, max_batch),
                factor=1.0,
                latency_mean_s=float(np.mean(latency)),
                requests=len(alone),
            )
        ],
        notes=notes,
    )
    points = list(base.load_points)
    for concurrency in sorted({int(c["concurrency"]) for c in cells} - {1}):
        done = _done([r for r in requests if r.get("concurrency") == concurrency])
        if len(done) < MIN_REQUESTS:
            notes.append(f"concurrency {concurrency}: {len(done)} requests done, too few to fit: left out")
            continue
        target = float(np.mean([float(r["latency_s"]) for r in done]))
        load = _load(concurrency, replicas, max_batch)
        below = base.model_copy(update={"load_points": [p for p in points if p.load < load]})
        factor, note = _fit_factor(below, load, concurrency, len(done), target, seed)
        if note:
            notes.append(f"concurrency {concurrency}: {note}")
        points.append(
            LoadPoint(
                concurrency=concurrency,
                load=load,
                factor=factor,
                latency_mean_s=target,
                requests=len(done),
            )
        )
    if len(points) == 1:
        notes.append("only concurrency 1 measured: service time taken not to change with load")
    return base.model_copy(update={"load_points": points, "notes": notes})


def engine_batch_wait_s(record: Mapping[str, Any]) -> float:
    """The longest a queued job of the fleet's servers waits for batch partners: the embedded engine's
    `--batch-wait-ms` as the fleet's commands gave it, else the engine's default; 0 for other servers (their
    batching, if any, is not the engine's)."""
    default = EngineSettings.model_fields["batch_wait_ms"].default / 1000
    for command in record.get("commands") or []:
        try:
            argv = shlex.split(str(command))
        except ValueError:
            continue
        if not any(a == "-m" and b == "studio.engine" for a, b in itertools.pairwise(argv)):
            continue
        for at, arg in enumerate(argv):
            if arg == "--batch-wait-ms" and at + 1 < len(argv):
                return float(argv[at + 1]) / 1000
            if arg.startswith("--batch-wait-ms="):
                return float(arg.split("=", 1)[1]) / 1000
        return default
    return 0.0


def _handover(rows: Sequence[Mapping[str, Any]]) -> float:
    """The median time a server took between one job's end and the start of the next, where the next was already
    at the server (accepted before the first ended), over the closed-loop cells' requests; 0 with fewer than
    MIN_REQUESTS such pairs. A job's start is its end less its inference time, both as the studio saw them: a
    constant delay in seeing them cancels out."""
    jobs: dict[tuple[Any, Any], list[tuple[float, float, float]]] = {}
    for row in _done(rows):
        if row.get("inference_s") is None or row.get("completed") is None or row.get("accepted") is None:
            continue
        end = float(row["completed"])
        key = (row.get("concurrency"), row.get("endpoint"))
        jobs.setdefault(key, []).append((end - float(row["inference_s"]), end, float(row["accepted"])))
    gaps = []
    for runs in jobs.values():
        runs.sort()
        for (_, end, _), (start, _, accepted) in itertools.pairwise(runs):
            if accepted < end and start >= end - 1e-3:  # it waited; a batch partner starts with it, not after
                gaps.append(max(0.0, start - end))
    return float(np.median(gaps)) if len(gaps) >= MIN_REQUESTS else 0.0


def _load(concurrency: int, replicas: int, max_batch: int) -> float:
    """Where a closed-loop cell sits on the slowdown curve: the share of replicas it keeps busy, or, where the server
    batches, its batch size (its requests per replica, up to the batch)."""
    if max_batch > 1:
        return float(min(max_batch, max(1.0, concurrency / replicas)))
    return min(concurrency, replicas) / replicas


def _closed_loop_mean(
    model: FleetModel, load: float, factor: float, concurrency: int, requests: int, seed: int
) -> float:
    """The simulated closed loop's mean latency with the model's points below `load` and `factor` at it."""
    curve = (*model.slowdown(), (load, factor))
    fleet = dataclasses.replace(model.sim(), slowdown=curve)
    runs = runs_of(fleet, requests, concurrency=concurrency, seed=seed, total=FIT_REQUESTS)
    return float(np.mean(pooled(runs).latency_s))


def _fit_factor(
    model: FleetModel, load: float, concurrency: int, requests: int, target_s: float, seed: int
) -> tuple[float, str]:
    """The slowdown at `load` at which the simulated closed loop of `concurrency` (runs of the cell's length, the
    points below fitted already) has the cell's mean latency: bisection on its logarithm (the latency grows with
    it)."""

    def mean(factor: float) -> float:
        return _closed_loop_mean(model, load, factor, concurrency, requests, seed)

    low, high = (math.log(bound) for bound in FACTOR_BOUNDS)
    if mean(FACTOR_BOUNDS[0]) >= target_s:
        return FACTOR_BOUNDS[0], f"faster than the concurrency-1 figures allow: factor held at {FACTOR_BOUNDS[0]}"
    if mean(FACTOR_BOUNDS[1]) <= target_s:
        return FACTOR_BOUNDS[1], f"slower than the model reaches: factor held at {FACTOR_BOUNDS[1]}"
    for _ in range(FIT_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if mean(math.exp(middle)) < target_s else (low, middle)
    return round(math.exp((low + high) / 2), 4), ""
