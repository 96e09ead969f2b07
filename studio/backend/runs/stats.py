"""Latency and throughput figures of a set of requests: percentiles, queue wait vs inference, goodput.

Names follow vLLM-Omni's diffusion benchmark where they overlap (latency percentiles, throughput), so the
numbers compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RequestSample:
    """One finished request, reduced to what the figures need."""

    state: str  # done | failed | cancelled | lost
    tier: str | None
    created: float
    finished: float | None
    latency_s: float | None
    queue_wait_s: float | None
    inference_s: float | None


@dataclass(frozen=True)
class LatencySummary:
    count: int
    completed: int
    failed: int
    cancelled: int
    latency_mean_s: float | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None
    queue_wait_mean_s: float | None = None
    inference_mean_s: float | None = None
    duration_s: float | None = None
    throughput_per_min: float | None = None
    slo_s: float | None = None
    goodput: float | None = None  # share of all requests that completed within the SLO
    per_tier: dict[str, LatencySummary] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["per_tier"] = {tier: summary.as_dict() for tier, summary in self.per_tier.items()}
        return data


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in 0..100."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarize(samples: Iterable[RequestSample], slo_s: float | None = None, by_tier: bool = True) -> LatencySummary:
    samples = list(samples)
    done = [s for s in samples if s.state == "done" and s.latency_s is not None]
    latencies = [s.latency_s for s in done]
    ended = [s.finished for s in samples if s.finished is not None]
    duration = (max(ended) - min(s.created for s in samples)) if ended and samples else None
    figures: dict[str, Any] = {
        "count": len(samples),
        "completed": len(done),
        "failed": sum(s.state in ("failed", "lost") for s in samples),
        "cancelled": sum(s.state == "cancelled" for s in samples),
        "slo_s": slo_s,
        "duration_s": duration,
    }
    if latencies:
        figures.update(
            latency_mean_s=_mean(latencies),
            latency_p50_s=percentile(latencies, 50),
            latency_p90_s=percentile(latencies, 90),
            latency_p95_s=percentile(latencies, 95),
            latency_p99_s=percentile(latencies, 99),
            latency_max_s=max(latencies),
            queue_wait_mean_s=_mean([s.queue_wait_s for s in done if s.queue_wait_s is not None]),
            inference_mean_s=_mean([s.inference_s for s in done if s.inference_s is not None]),
        )
        if duration and duration > 0:
            figures["throughput_per_min"] = len(done) / duration * 60.0
    if slo_s is not None and samples:
        figures["goodput"] = sum(lat <= slo_s for lat in latencies) / len(samples)
    per_tier = {}
    if by_tier:
        tiers = sorted({s.tier for s in samples if s.tier})
        if len(tiers) > 1:
            per_tier = {tier: summarize([s for s in samples if s.tier == tier], slo_s, by_tier=False) for tier in tiers}
    return LatencySummary(**figures, per_tier=per_tier)
