"""One cell of a bench (one tier, guardrails and concurrency setting, on one fleet or the endpoints given): what it
measured, how sure its figures are (spread.py) and the machine's load meanwhile (load.py), and its row in
summary.csv and report.json (with vLLM-Omni's diffusion benchmark's names beside the studio's, so that figures
compare)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from studio.backend.bench.load import CellLoad
from studio.backend.bench.spread import CellSpread
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.stats import LatencySummary

if TYPE_CHECKING:
    from studio.backend.bench.fleets import Fleet


@dataclass
class CellResult:
    tier: str
    guardrails: bool
    concurrency: int
    endpoints: int
    summary: LatencySummary
    views: list[RequestView]
    server_metrics: list[dict[str, Any]]
    fleet: Fleet | None = None  # None: the endpoints the bench was given
    nodes: list[str] | None = None  # on Ray: the node each replica of the fleet ran on
    spread: CellSpread | None = None  # the 95% intervals of its p50, p90 and videos/min
    load: CellLoad | None = None  # the machine's load while its measured requests ran

    def fleet_columns(self) -> dict[str, Any]:
        """Which fleet the cell ran on, and its throughput per device (GPU, or CPU core on a CPU)."""
        if self.fleet is None:
            return {}
        per_min = self.summary.throughput_per_min
        where = {"cluster": "ray", "nodes": ", ".join(self.nodes or [])} if self.fleet.on_ray else {}
        return {
            "layout": str(self.fleet.layout),
            "replicas": self.fleet.layout.replicas,
            "width": self.fleet.layout.width,
            "variant": self.fleet.variant.name,
            **where,
            "devices": self.fleet.devices,
            "device_kind": self.fleet.device_kind,
            "videos_per_min_per_device": None if per_min is None else per_min / self.fleet.devices,
        }

    def row(self) -> dict[str, Any]:
        s = self.summary
        e2el = [
            v.timings.latency_s for v in self.views if v.state is RequestState.DONE and v.timings.latency_s
        ]  # sent to done
        duration = s.duration_s or 0.0
        good = (s.goodput or 0.0) * s.count if s.goodput is not None else None
        fleet = self.fleet_columns()
        spread = (self.spread or CellSpread()).columns()
        return {
            **{key: fleet[key] for key in ("layout", "variant") if key in fleet},
            "tier": self.tier,
            "guardrails": self.guardrails,
            "concurrency": self.concurrency,
            "endpoints": self.endpoints,
            "completed": s.completed,
            "failed": s.failed,
            "latency_mean_s": s.latency_mean_s,
            "latency_p50_s": s.latency_p50_s,
            "latency_p90_s": s.latency_p90_s,
            **{key: spread[key] for key in ("latency_p50_low_s", "latency_p50_high_s")},
            **{key: spread[key] for key in ("latency_p90_low_s", "latency_p90_high_s")},
            "latency_p95_s": s.latency_p95_s,
            "latency_p99_s": s.latency_p99_s,
            "latency_max_s": s.latency_max_s,
            "studio_wait_mean_s": s.studio_wait_mean_s,
            "queue_wait_mean_s": s.queue_wait_mean_s,
            "inference_mean_s": s.inference_mean_s,
            "download_mean_s": s.download_mean_s,
            "server_latency_mean_s": s.server_latency_mean_s,
            "server_latency_p50_s": s.server_latency_p50_s,
            "server_latency_p90_s": s.server_latency_p90_s,
            "server_latency_p99_s": s.server_latency_p99_s,
            "videos_per_min": s.throughput_per_min,
            **{key: spread[key] for key in ("videos_per_min_low", "videos_per_min_high")},
            "in_flight_s": s.in_flight_s,
            "goodput": s.goodput,
            "slo_s": s.slo_s,
            **{key: value for key, value in fleet.items() if key not in ("layout", "variant")},
            # vLLM-Omni's diffusion benchmark names, so figures compare.
            "duration": duration,
            "request_throughput": s.completed / duration if duration else None,
            "request_goodput": good / duration if duration and good is not None else None,
            "mean_e2el_ms": None if s.server_latency_mean_s is None else s.server_latency_mean_s * 1000,
            "median_e2el_ms": None if s.server_latency_p50_s is None else s.server_latency_p50_s * 1000,
            "p99_e2el_ms": None if s.server_latency_p99_s is None else s.server_latency_p99_s * 1000,
            "std_e2el_ms": float(_std(e2el)) * 1000 if e2el else None,
            "server_running_max": max((m.get("running") or 0 for m in self.server_metrics), default=None),
            "server_waiting_max": max((m.get("waiting") or 0 for m in self.server_metrics), default=None),
            **(self.load.columns() if self.load is not None else {}),
        }


def _std(values: Sequence[float]) -> float:
    import numpy as np

    return float(np.std(values))
