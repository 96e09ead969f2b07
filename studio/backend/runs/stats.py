"""Latency and throughput figures of a set of requests: percentiles, the parts of a latency, goodput.

Latency is what a person waits: from pressing Generate (the request's submit in the studio) to its video in the
page, the studio's own queue included. Its parts add up to it: waiting in the studio for a free slot, queued at the
server, inference, download. What vLLM-Omni's diffusion benchmark calls e2el (from sending the request to the
server) stands beside it as `server_latency_*`, named as such, so the numbers compare.

Throughput is counted over the time work was in flight (some request submitted and not yet ended), never over the
idle gaps between runs: a batch made in 30 s reads as a batch made in 30 s, however long ago the first run was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np


class Timings(Protocol):
    """What the parts are read from: studio.backend.clients.base.RequestTimings."""

    created: float
    sent: float | None
    completed: float | None
    downloaded: float | None

    @property
    def queue_wait_s(self) -> float | None: ...

    @property
    def inference_s(self) -> float | None: ...


@dataclass(frozen=True)
class LatencyParts:
    """Where one request's time went. Waiting in the studio and download are measured; the time at the server is
    split at the queue's lower bound (RequestTimings.queue_wait_s), so inference is the rest of it, an upper bound
    (what a poll saw late counts as inference). Both bounds hold, and the parts add up to the latency. A server
    that tells nothing of its job until it ends (no inference figure, no poll that saw it queued or running) gives
    no split: queue and inference are unknown, and only its time at the server is."""

    latency_s: float | None = None  # pressing Generate to the video on disk, shown in the page
    studio_wait_s: float | None = None  # submit to sent: waiting for a free slot in the studio
    at_server_s: float | None = None  # sent to the server's end: queue and inference together
    queue_s: float | None = None  # at the server before inference, at least
    inference_s: float | None = None  # at most
    download_s: float | None = None  # server done to the video on disk
    server_latency_s: float | None = None  # sent to the video on disk (vLLM-Omni's e2el), the server-side figure

    @classmethod
    def of(
        cls,
        created: float,
        sent: float | None,
        completed: float | None,
        downloaded: float | None,
        queue_lower_s: float | None,
        inference_upper_s: float | None,
    ) -> LatencyParts:
        """From a request's instants and its timings' bounds (RequestTimings.queue_wait_s and inference_s); parts
        whose instants are not known yet are None."""
        end = downloaded or completed
        studio_wait = None if sent is None else max(0.0, sent - created)
        at_server = None if sent is None or completed is None else max(0.0, completed - sent)
        split = at_server is not None and inference_upper_s is not None
        queue = min(at_server, max(0.0, queue_lower_s or 0.0)) if split else None
        return cls(
            latency_s=None if end is None else max(0.0, end - created),
            studio_wait_s=studio_wait,
            at_server_s=at_server,
            queue_s=queue,
            inference_s=None if at_server is None or queue is None else at_server - queue,
            download_s=None if completed is None or downloaded is None else max(0.0, downloaded - completed),
            server_latency_s=None if end is None or sent is None else max(0.0, end - sent),
        )

    def as_record(self) -> dict[str, float | None]:
        """Flat, by the names the history's exports use: `latency_s` is from pressing Generate."""
        return {
            "latency_s": self.latency_s,
            "studio_wait_s": self.studio_wait_s,
            "queue_wait_s": self.queue_s,
            "inference_s": self.inference_s,
            "download_s": self.download_s,
            "server_latency_s": self.server_latency_s,
        }


def latency_parts(timings: Timings) -> LatencyParts:
    t = timings
    return LatencyParts.of(t.created, t.sent, t.completed, t.downloaded, t.queue_wait_s, t.inference_s)


def latency_parts_from_record(timings: Mapping[str, Any]) -> LatencyParts:
    """From a request's timings as the history stores them (RequestTimings.as_dict)."""
    created = timings.get("created")
    if created is None:
        return LatencyParts()
    instants = (timings.get(key) for key in ("sent", "completed", "downloaded", "queue_wait_s", "inference_s"))
    return LatencyParts.of(created, *instants)


@dataclass(frozen=True)
class RequestSample:
    """One finished request, reduced to what the figures need. Latencies are those of a request done."""

    state: str  # done | failed | cancelled | lost
    tier: str | None
    created: float
    finished: float | None
    latency_s: float | None = None
    studio_wait_s: float | None = None
    queue_wait_s: float | None = None
    inference_s: float | None = None
    download_s: float | None = None
    server_latency_s: float | None = None

    @classmethod
    def of(cls, state: str, tier: str | None, timings: Timings, finished: float | None) -> RequestSample:
        parts = latency_parts(timings) if state == "done" else LatencyParts()
        return cls(
            state=state,
            tier=tier,
            created=timings.created,
            finished=finished,
            latency_s=parts.latency_s,
            studio_wait_s=parts.studio_wait_s,
            queue_wait_s=parts.queue_s,
            inference_s=parts.inference_s,
            download_s=parts.download_s,
            server_latency_s=parts.server_latency_s,
        )

    @property
    def span(self) -> tuple[float, float] | None:
        """While it was in flight: from its submit to its end."""
        return None if self.finished is None else (self.created, max(self.created, self.finished))


# ---- time in flight --------------------------------------------------------------------------------
def in_flight_intervals(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The stretches of time some request was in flight: the spans merged where they touch or overlap."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


class InFlightClock:
    """Seconds of work in flight since the first submit: wall time with the idle gaps between stretches of work
    left out, so later batches keep their width on a time axis however long the studio sat idle."""

    def __init__(self, spans: Iterable[tuple[float, float]]) -> None:
        self.intervals = in_flight_intervals(spans)
        starts, offsets, total = [], [], 0.0
        for start, end in self.intervals:
            starts.append(start)
            offsets.append(total)
            total += end - start
        self._starts, self._offsets, self.total_s = starts, offsets, total

    def __call__(self, instant: float) -> float:
        """The in-flight seconds at a wall-clock instant (one in a gap reads as the end of the stretch before)."""
        index = int(np.searchsorted(self._starts, instant, side="right")) - 1
        if index < 0:
            return 0.0
        start, end = self.intervals[index]
        return self._offsets[index] + min(instant, end) - start


def in_flight_s(samples: Iterable[RequestSample]) -> float | None:
    spans = [span for sample in samples if (span := sample.span) is not None]
    return InFlightClock(spans).total_s if spans else None


def throughput_so_far(samples: Sequence[RequestSample], points: int = 120) -> list[tuple[float, float]]:
    """(in-flight seconds, videos/min while in flight up to then): its last point is the summary's
    throughput_per_min. Sampled evenly and at each video's end, so each step up shows where it happened."""
    clock = InFlightClock(span for sample in samples if (span := sample.span) is not None)
    total = clock.total_s
    if total <= 0:
        return []
    ends = np.sort([clock(s.finished) for s in samples if s.state == "done" and s.finished is not None])
    instants = np.unique(np.concatenate([np.linspace(0.0, total, points + 1), ends]))
    made = np.searchsorted(ends, instants, side="right")
    rates = np.divide(made * 60.0, instants, out=np.zeros_like(instants), where=instants > 0)
    return [(float(t), float(rate)) for t, rate in zip(instants, rates, strict=True)]


# ---- summary ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatencySummary:
    count: int
    completed: int
    failed: int
    cancelled: int
    # From pressing Generate to the video in the page, of the requests done.
    latency_mean_s: float | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    latency_max_s: float | None = None
    # Its parts, means over the requests done (queue a lower bound, inference an upper one: see LatencyParts).
    studio_wait_mean_s: float | None = None
    queue_wait_mean_s: float | None = None
    inference_mean_s: float | None = None
    download_mean_s: float | None = None
    # The server-side figure: from sending the request to its video (vLLM-Omni's e2el), the studio's queue left out.
    server_latency_mean_s: float | None = None
    server_latency_p50_s: float | None = None
    server_latency_p90_s: float | None = None
    server_latency_p99_s: float | None = None
    duration_s: float | None = None  # first submit to last end, idle gaps included
    in_flight_s: float | None = None  # the time work was in flight: the throughput's window
    throughput_per_min: float | None = None  # videos per minute while in flight
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


def _means_of_parts(done: list[RequestSample]) -> dict[str, float | None]:
    def mean_of(name: str) -> float | None:
        return _mean([value for s in done if (value := getattr(s, name)) is not None])

    return {
        "studio_wait_mean_s": mean_of("studio_wait_s"),
        "queue_wait_mean_s": mean_of("queue_wait_s"),
        "inference_mean_s": mean_of("inference_s"),
        "download_mean_s": mean_of("download_s"),
    }


def _percentiles(values: list[float], prefix: str, qs: Sequence[int]) -> dict[str, float | None]:
    if not values:
        return {}
    return {f"{prefix}_mean_s": _mean(values), **{f"{prefix}_p{q}_s": percentile(values, q) for q in qs}}


def summarize(samples: Iterable[RequestSample], slo_s: float | None = None, by_tier: bool = True) -> LatencySummary:
    samples = list(samples)
    done = [s for s in samples if s.state == "done" and s.latency_s is not None]
    latencies = [s.latency_s for s in done]
    ended = [s.finished for s in samples if s.finished is not None]
    window = in_flight_s(samples)
    figures: dict[str, Any] = {
        "count": len(samples),
        "completed": len(done),
        "failed": sum(s.state in ("failed", "lost") for s in samples),
        "cancelled": sum(s.state == "cancelled" for s in samples),
        "slo_s": slo_s,
        "duration_s": (max(ended) - min(s.created for s in samples)) if ended else None,
        "in_flight_s": window,
    }
    if latencies:
        figures.update(_percentiles(latencies, "latency", (50, 90, 95, 99)), latency_max_s=max(latencies))
        figures.update(_means_of_parts(done))
        server = [s.server_latency_s for s in done if s.server_latency_s is not None]
        figures.update(_percentiles(server, "server_latency", (50, 90, 99)))
        if window:
            figures["throughput_per_min"] = len(done) / window * 60.0
    if slo_s is not None and samples:
        figures["goodput"] = sum(lat <= slo_s for lat in latencies) / len(samples)
    per_tier = {}
    if by_tier:
        tiers = sorted({s.tier for s in samples if s.tier})
        if len(tiers) > 1:
            per_tier = {tier: summarize([s for s in samples if s.tier == tier], slo_s, by_tier=False) for tier in tiers}
    return LatencySummary(**figures, per_tier=per_tier)
