"""What every client of one server shares, whatever the server's contract: the base class the endpoint pool builds
each client from (`ServerClient`), the errors a request can end in, a request's timings and outcome, and saving a
video's bytes. The contracts themselves: studio.backend.clients.vllm_omni (vLLM-Omni's video API) and
studio.backend.clients.cosmos_framework (the Cosmos Framework server's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from studio.protocol import JobRecord, JobStatus


class ClientError(RuntimeError):
    """A request that did not produce a job result: rejected, unreachable, timed out."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class ServerUnreachable(ClientError):
    """No answer at all (connection refused, reset, DNS): another replica may take the request."""


class RequestRejected(ClientError):
    """The server refused the request (4xx/5xx without a job record)."""


class JobTimeout(ClientError):
    pass


def normalize_base_url(url: str) -> str:
    """Accept http://host:port or http://host:port/v1 and return the /v1 base the SDK wants."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
    return url if url.endswith("/v1") else url + "/v1"


def server_root(url: str) -> str:
    base = normalize_base_url(url)
    return base[: -len("/v1")]


# What each figure of RequestTimings is, for the sidecar and the history beside the figures themselves.
TIMING_BOUNDS = (
    "queue_wait_s is a lower bound and queue_wait_max_s an upper bound of the time at the server before "
    "generation started (the server reports no start time; polls see it late). inference_s is an upper bound: the "
    "server's inference_time_s (vLLM-Omni counts it from acceptance, so a busy server's queue is in it), tightened "
    "by the last poll that saw the job queued; inference_min_s is a lower bound: the server's stage durations, "
    "where it reports them."
)


@dataclass
class RequestTimings:
    """Wall-clock instants (time.time()) of one request's life, and the server's own figures.

    Polls see every change up to one poll interval late, so what happened at the server between two polls is
    known only within bounds: each figure says which bound it is, and uses the server's own figures where it
    reports them."""

    created: float = field(default_factory=time.time)
    sent: float | None = None
    accepted: float | None = None
    first_running: float | None = None
    last_queued: float | None = None  # the last poll that still saw the job queued
    last_unfinished: float | None = None  # the last poll that still saw the job queued or running
    completed: float | None = None  # the first poll that saw the job finished
    downloaded: float | None = None
    server_inference_s: float | None = None
    server_stages_s: float | None = None  # the sum of the server's stage durations, where it reports them

    @property
    def studio_wait_s(self) -> float | None:
        """Time waiting in the studio for a free slot before being sent."""
        return None if self.sent is None else self.sent - self.created

    @property
    def server_s(self) -> float | None:
        return None if self.sent is None or self.completed is None else self.completed - self.sent

    @property
    def inference_s(self) -> float | None:
        """Generation time, an upper bound: the smallest of the server's inference_time_s (from acceptance on
        vLLM-Omni, queue included) and the time from the last poll that saw the job queued to the first that saw it
        finished. (The first poll that sees it running comes late: counting from it would understate inference.)"""
        bounds = [] if self.server_inference_s is None else [self.server_inference_s]
        if self.completed is not None and self.last_queued is not None:
            bounds.append(self.completed - self.last_queued)
        if bounds:
            return min(bounds)
        # A server that reports no inference time: from the first sight of the job running, the best there is.
        if self.completed is not None and self.first_running is not None:
            return self.completed - self.first_running
        return None

    @property
    def inference_min_s(self) -> float | None:
        """Generation time, a lower bound: the server's stage durations (only some servers report them)."""
        return self.server_stages_s

    @property
    def queue_wait_s(self) -> float | None:
        """Time at the server before generation started, a lower bound: the job was still queued at the last poll
        that saw it queued, and had not finished at the last poll that saw it unfinished, so it started no sooner
        than that poll minus its inference time. 0 for a job that left the queue at once."""
        if self.sent is None or self.completed is None:
            return None
        start = max(self.last_queued or self.sent, self.sent)
        inference = self.inference_s
        if self.last_unfinished is not None and inference is not None:
            start = max(start, self.last_unfinished - inference)
        return max(0.0, start - self.sent)

    @property
    def queue_wait_max_s(self) -> float | None:
        """Time at the server before generation started, an upper bound: it had started by the first poll that saw
        it running, and by its end minus the least it can have taken."""
        if self.sent is None or self.completed is None:
            return None
        start = self.completed - (self.inference_min_s or 0.0)
        if self.first_running is not None:
            start = min(start, self.first_running)
        return max(0.0, start - self.sent)

    @property
    def latency_s(self) -> float | None:
        """End to end of the request: from sending it to the mp4 on disk (vLLM-Omni's benchmark e2el).
        Time spent waiting in the studio for a free slot is `studio_wait_s`, apart."""
        end = self.downloaded or self.completed
        return None if end is None or self.sent is None else end - self.sent

    @property
    def total_s(self) -> float | None:
        """From the submit in the studio to the mp4 on disk, studio wait included."""
        end = self.downloaded or self.completed
        return None if end is None else end - self.created

    def record_server_figures(self, record: JobRecord) -> None:
        """The figures a finished job's record gives about itself."""
        self.server_inference_s = record.inference_time_s
        stages = [value for value in (record.stage_durations or {}).values() if isinstance(value, (int, float))]
        self.server_stages_s = sum(stages) if stages else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "sent": self.sent,
            "accepted": self.accepted,
            "first_running": self.first_running,
            "last_queued": self.last_queued,
            "last_unfinished": self.last_unfinished,
            "completed": self.completed,
            "downloaded": self.downloaded,
            "server_inference_s": self.server_inference_s,
            "server_stages_s": self.server_stages_s,
            "studio_wait_s": self.studio_wait_s,
            "queue_wait_s": self.queue_wait_s,
            "queue_wait_max_s": self.queue_wait_max_s,
            "inference_s": self.inference_s,
            "inference_min_s": self.inference_min_s,
            "latency_s": self.latency_s,
            "total_s": self.total_s,
            "bounds": TIMING_BOUNDS,
        }


@dataclass
class JobOutcome:
    record: JobRecord
    timings: RequestTimings
    video_path: Path | None = None

    @property
    def ok(self) -> bool:
        return self.record.status is JobStatus.COMPLETED and self.video_path is not None


UpdateCallback = Callable[[JobRecord], Awaitable[None] | None]


class ServerClient:
    """What every client of one server shares, whatever its contract: the options the endpoint pool builds each
    client from, closing, and the async context. Subclasses speak the contract (studio.backend.clients.vllm_omni's
    VideoClient: vLLM-Omni's video API; studio.backend.clients.cosmos_framework: the Cosmos Framework server's)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        http_timeout_s: float = 60.0,
        poll_interval_s: float = 0.25,
        max_retries: int = 2,
    ):
        self.base_url = self.server_url(base_url)
        self.api_key = api_key
        self.http_timeout_s = http_timeout_s
        self.poll_interval_s = poll_interval_s
        self.max_retries = max_retries

    @staticmethod
    def server_url(url: str) -> str:
        """The URL the contract's routes hang from, for a server URL as the user gave it."""
        return normalize_base_url(url)

    async def close(self) -> None:
        """Nothing held between calls, unless a subclass holds it."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def save_stream(chunks: AsyncIterable[bytes], dest: Path) -> int:
    """Write a video's bytes to `dest` via a .part file, renamed when whole (a broken-off download leaves no file
    that looks like a video). Returns its size in bytes. A disk that cannot take it (full, read-only, gone) is a
    ClientError; any other failure, the stream's own, is raised as it is."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    size = 0
    try:
        with part.open("wb") as handle:
            async for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise ClientError(f"cannot write the video to {dest.parent}: {exc.strerror or exc}") from exc
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(dest)
    return size


async def notify(callback: UpdateCallback | None, record: JobRecord) -> None:
    """Tell `callback` (a function or a coroutine function, or None) of the job's record."""
    if callback is None:
        return
    result = callback(record)
    if asyncio.iscoroutine(result):
        await result
