"""One job against one server: create, poll, download, cancel, through the openai SDK's videos API.

A failed job is a result (the server answers with the job's error code and the job JSON); a transport
failure or a rejected request is an error. Every step is timestamped so queue wait and inference time can
be told apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import secrets
import sys
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
from pydantic import ValidationError

from studio.backend.clients.events import server_events
from studio.backend.clients.http import async_client, tls_context
from studio.protocol import (
    ORDER_HEADER,
    EventType,
    JobRecord,
    JobStatus,
    PreviewEvent,
    ProgressEvent,
    VideoRequest,
    error_message,
    job_record_from_body,
)

log = logging.getLogger(__name__)

# A queued job is polled less and less often while it waits (up to every 1 s): many jobs queued at a server must
# not flood it. A running one is polled at the set interval: a server runs few at once, and its completion is
# what the user waits for.
QUEUED_POLL_CAP_S = 1.0
# A job's events go silent for at most 15 s (the engine's keep-alive); silence longer than this ends the stream.
EVENTS_SILENCE_S = 60.0
# Below that cap, queued jobs back off only as far as keeps their polls to about this many a second in all
# (16 queued jobs: every 0.32 s; 64: every 1 s): a short queue is seen moving at once, a long one stays cheap.
QUEUED_POLLS_PER_S = 50.0
# A running job whose progress moves is polled again when it should be done, but no sooner than this.
MIN_POLL_S = 0.05


def poll_when_done(mark: tuple[float, float], now: float, progress: float, interval: float) -> float:
    """The next poll's delay for a running job: its expected time to finish at the rate its progress moved since
    `mark` (time, progress), within [MIN_POLL_S, interval]. Without it a job that ends just after a poll is seen
    a whole interval late, which on short jobs is most of their latency."""
    since, first = mark
    if progress <= first or now <= since:
        return interval
    remaining = (100.0 - progress) * (now - since) / (progress - first)
    return min(interval, max(MIN_POLL_S, remaining))


def _lazy_module(name: str):
    """`name`, loaded on first use: the openai SDK takes most of a second to import, which `generate` spends
    while the engine it just launched starts (see `load_sdk`) instead of before launching it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


openai = _lazy_module("openai")


def load_sdk() -> None:
    """Do now what the first request would otherwise do (0.1 to 1 s): import the SDK, its videos resource and
    its HTTP transport, and build the shared TLS context."""
    importlib.import_module("openai.resources.videos")
    openai.DefaultAsyncHttpxClient(verify=tls_context())  # imports the transport; never opens a connection


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
    client from, closing, and the async context. Subclasses speak the contract (VideoClient: vLLM-Omni's video
    API; studio.backend.clients.cosmos_framework: the Cosmos Framework server's)."""

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


class VideoClient(ServerClient):
    """Speaks to one server. Safe to share between concurrent jobs."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        http_timeout_s: float = 60.0,
        poll_interval_s: float = 0.25,
        max_retries: int = 2,
    ):
        super().__init__(base_url, api_key, http_timeout_s, poll_interval_s, max_retries)
        self._options = {
            "base_url": self.base_url,
            "api_key": api_key or "EMPTY",
            "timeout": httpx.Timeout(http_timeout_s, connect=10.0),
            "max_retries": max_retries,
        }
        # One SDK client per event loop: its connection pool belongs to the loop that opened it.
        self._clients: dict[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = {}
        self._following = 0  # jobs being polled through this client now
        # Whether the server offers a job's events (the embedded engine does; vLLM-Omni has no such route): None
        # until the first job tells.
        self.events_offered: bool | None = None
        # The order its POSTs were sent in, for servers that keep it where they arrive out of it (the embedded
        # engine; others ignore the header): a stream of its own, counted from 0.
        self._send_stream = secrets.token_hex(8)
        self._sent = itertools.count()

    @property
    def _sdk(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old_loop in [old for old in self._clients if old.is_closed()]:
                del self._clients[old_loop]
            # The SDK's own HTTP client would build a TLS context per client (0.1 s); the shared one is built once.
            http_client = openai.DefaultAsyncHttpxClient(verify=tls_context())
            client = self._clients[loop] = openai.AsyncOpenAI(**self._options, http_client=http_client)
        return client

    async def close(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    async def healthy(self, timeout_s: float = 5.0) -> bool:
        """GET /health answers 200."""
        try:
            async with async_client(timeout_s) as http:
                return (await http.get(self.base_url[: -len("/v1")] + "/health")).status_code == 200
        except httpx.HTTPError:
            return False

    # ---- single calls ------------------------------------------------------------------------------
    async def create(self, request: VideoRequest) -> JobRecord:
        """POST /v1/videos. Returns the job (possibly already failed, e.g. a guardrail block)."""
        fields = request.form_fields()
        prompt = fields.pop("prompt")
        reference = request.input_reference
        # Never retried: a retry after a lost response would create a second job.
        sdk = self._sdk.with_options(max_retries=0)
        order = f"{self._send_stream}.{next(self._sent)}"  # taken before the first await: the order of the calls
        kwargs: dict[str, Any] = {"prompt": prompt, "extra_body": fields, "extra_headers": {ORDER_HEADER: order}}
        if reference is not None:
            kwargs["input_reference"] = (Path(reference).name, Path(reference).read_bytes())
        return await self._job_answer(sdk.videos.with_raw_response.create(**kwargs), "create")

    async def retrieve(self, job_id: str) -> JobRecord:
        return await self._job_answer(self._sdk.videos.with_raw_response.retrieve(job_id), "retrieve")

    async def download(self, job_id: str, dest: Path) -> int:
        """Stream the mp4 to dest (save_stream). Returns its size in bytes."""
        try:
            async with self._sdk.videos.with_streaming_response.download_content(job_id) as response:
                return await save_stream(response.iter_bytes(), dest)
        except openai.APIStatusError as exc:
            raise RequestRejected(self._message(exc), exc.status_code) from exc
        except (openai.APIConnectionError, httpx.HTTPError) as exc:
            raise ClientError(f"download of {job_id} from {self.base_url} broke off: {exc}") from exc

    async def cancel(self, job_id: str) -> bool:
        """DELETE the job. True if the server confirmed; False if it no longer knows the job."""
        try:
            await self._sdk.videos.delete(job_id)
            return True
        except openai.NotFoundError:
            return False
        except openai.APIStatusError as exc:
            raise RequestRejected(self._message(exc), exc.status_code) from exc
        except openai.APIConnectionError as exc:
            raise ClientError(f"cannot reach {self.base_url}: {exc}") from exc

    # ---- a whole job -------------------------------------------------------------------------------
    async def run(
        self,
        request: VideoRequest,
        dest: Path,
        on_update: UpdateCallback | None = None,
        timeout_s: float = 3600.0,
        timings: RequestTimings | None = None,
        on_accepted: Callable[[JobRecord], None] | None = None,
        on_event: JobEventCallback | None = None,
    ) -> JobOutcome:
        """Create, follow until finished, download. Cancelling the task DELETEs the job on the server."""
        timings = timings or RequestTimings()
        timings.sent = time.time()
        timings.last_unfinished = None
        record = await self.create(request)
        timings.accepted = time.time()
        if on_accepted is not None:
            on_accepted(record)
        return await self.follow(record, dest, on_update, timeout_s, timings, on_event)

    async def _follow_events(
        self,
        record: JobRecord,
        on_update: UpdateCallback | None,
        on_event: JobEventCallback | None,
        deadline: float,
        timings: RequestTimings,
    ) -> JobRecord | None:
        """The job followed by its events (GET /v1/videos/{id}/events) until it finishes or the stream breaks off:
        the last record it gave; None where the server offers no events (the caller polls). Each event arrives as
        it happens, so its arrival bounds the job's instants on both sides."""
        if self.events_offered is False or record.finished:
            return None
        url = f"{self.base_url}/videos/{record.id}/events"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        # A server that says nothing for this long (it sends a comment every 15 s) has gone: polling finds out how.
        timeout = httpx.Timeout(max(1.0, min(EVENTS_SILENCE_S, deadline - time.monotonic())), connect=10.0)
        try:
            async with (
                httpx.AsyncClient(timeout=timeout, verify=tls_context()) as http,
                http.stream("GET", url, headers=headers) as response,
            ):
                if response.status_code == 404:
                    # No such route (FastAPI's own answer: vLLM-Omni): this server offers no events. A job it does
                    # not know (an earlier studio's, a restarted server) is polling's to tell.
                    if (await response.aread()).strip() == b'{"detail":"Not Found"}':
                        self.events_offered = False
                    return None
                if response.status_code != 200:
                    return None
                self.events_offered = True
                async for kind, data in server_events(response.aiter_lines()):
                    now = time.time()
                    if kind == EventType.PROGRESS:
                        step = ProgressEvent.model_validate_json(data)
                        record = record.model_copy(update={"progress": step.progress})
                        if timings.first_running is None:
                            timings.first_running = now
                        timings.last_unfinished = now
                        if on_event is not None:
                            on_event(step)
                    elif kind == EventType.PREVIEW:
                        # What the video looks like so far: for the caller alone, nothing to record.
                        if on_event is not None:
                            on_event(PreviewEvent.model_validate_json(data))
                        continue
                    elif kind == EventType.STATUS:
                        record = JobRecord.model_validate_json(data)
                        if not record.finished:
                            timings.last_unfinished = now
                        if record.status is JobStatus.QUEUED:
                            timings.last_queued = now
                        elif record.status is JobStatus.IN_PROGRESS and timings.first_running is None:
                            timings.first_running = now
                    else:
                        continue
                    await notify(on_update, record)
                    if record.finished or time.monotonic() > deadline:
                        break
        except (httpx.HTTPError, ValidationError) as exc:  # polling takes over from the last record seen
            log.info("job %s: its events broke off (%s); polling it", record.id, exc)
        return record

    def _queued_poll_cap(self) -> float:
        return min(QUEUED_POLL_CAP_S, max(self.poll_interval_s, self._following / QUEUED_POLLS_PER_S))

    async def follow(
        self,
        record: JobRecord,
        dest: Path,
        on_update: UpdateCallback | None = None,
        timeout_s: float = 3600.0,
        timings: RequestTimings | None = None,
        on_event: JobEventCallback | None = None,
    ) -> JobOutcome:
        """Follow a job the server already has until it finishes, then download it (also after a restart of the
        studio: the job is found again by its id): by its events where the server offers them (each step reaches
        `on_event`), else by polling."""
        timings = timings or RequestTimings()
        await notify(on_update, record)
        deadline = time.monotonic() + timeout_s
        interval, seen_state = self.poll_interval_s, (record.status, record.progress)
        # (time, progress) the job's rate of progress is measured from: when it was last seen queued (progress 0),
        # else the first sight of it (a job followed again after a restart has run for an unknown time).
        mark = (time.monotonic(), record.progress if record.status is JobStatus.IN_PROGRESS else 0.0)
        self._following += 1
        try:
            followed = await self._follow_events(record, on_update, on_event, deadline, timings)
            if followed is not None:
                record = followed  # where the stream broke off, polling goes on from what it said last
            while not record.finished:
                if time.monotonic() > deadline:
                    await self._quiet_cancel(record.id)
                    raise JobTimeout(f"job {record.id} did not finish within {timeout_s:.0f} s; cancelled it")
                await asyncio.sleep(interval)
                # The answer describes the job at some instant between asking and answering: what bounds its
                # start or end from below takes the asking time, what bounds them from above the answering time.
                asked = time.time()
                record = await self.retrieve(record.id)
                # Poll less while nothing changes (a long queue, a server without progress): many jobs in
                # flight must not flood the server, whose event loop shares the CPU with generation.
                if (record.status, record.progress) != seen_state:
                    interval, seen_state = self.poll_interval_s, (record.status, record.progress)
                else:
                    cap = self._queued_poll_cap() if record.status is JobStatus.QUEUED else self.poll_interval_s
                    interval = min(max(interval, interval * 1.5), max(cap, self.poll_interval_s))
                if record.status is JobStatus.QUEUED:
                    mark = (time.monotonic(), 0.0)
                elif record.status is JobStatus.IN_PROGRESS:
                    interval = poll_when_done(mark, time.monotonic(), record.progress, interval)
                seen = time.time()
                if not record.finished:
                    timings.last_unfinished = asked
                if record.status is JobStatus.QUEUED:
                    timings.last_queued = asked
                elif record.status is JobStatus.IN_PROGRESS and timings.first_running is None:
                    timings.first_running = seen
                await notify(on_update, record)
        except asyncio.CancelledError:
            await asyncio.shield(self._quiet_cancel(record.id))
            raise
        finally:
            self._following -= 1
        timings.completed = time.time()
        timings.record_server_figures(record)
        if record.status is not JobStatus.COMPLETED:
            return JobOutcome(record=record, timings=timings)
        await self.download(record.id, dest)
        timings.downloaded = time.time()
        return JobOutcome(record=record, timings=timings, video_path=Path(dest))

    async def _quiet_cancel(self, job_id: str) -> None:
        with contextlib.suppress(ClientError):
            await self.cancel(job_id)

    # ---- errors ------------------------------------------------------------------------------------
    async def _job_answer(self, call: Awaitable[Any], name: str) -> JobRecord:
        """The job record a create or retrieve call answers, a failed job's included."""
        try:
            raw = await call
            return self._record(raw.http_response)
        except openai.APIStatusError as exc:
            return self._job_or_raise(exc)
        except openai.APITimeoutError as exc:
            raise ClientError(f"{self.base_url} did not answer the {name} call in time: {exc}") from exc
        except openai.APIConnectionError as exc:
            raise ServerUnreachable(f"cannot reach {self.base_url}: {exc}") from exc

    def _record(self, response: httpx.Response) -> JobRecord:
        try:
            return JobRecord.model_validate_json(response.content)
        except ValidationError as exc:  # not JSON, or JSON that is no job record
            raise ClientError(
                f"{self.base_url} answered with something that is not a job record "
                f"(HTTP {response.status_code}): {response.text[:200]!r}"
            ) from exc

    @staticmethod
    def _message(exc: openai.APIStatusError) -> str:
        """The server's own words. The SDK has already read the body and taken the error object out of vLLM's
        envelope (`.body`); its `.message` adds an "Error code" prefix the studio's messages do not want."""
        return error_message(exc.body, fallback=f"HTTP {exc.status_code}")

    def _job_or_raise(self, exc: openai.APIStatusError) -> JobRecord:
        # A failed job comes as the whole body with the job's error code; the SDK's `.body` keeps only its `error`.
        record = job_record_from_body(exc.response.content)
        if record is not None:
            return record
        raise RequestRejected(f"HTTP {exc.status_code}: {self._message(exc)}", exc.status_code) from exc


# A job's step (ProgressEvent) or its look so far (PreviewEvent), as its events tell them.
JobEventCallback = Callable[[ProgressEvent | PreviewEvent], None]


async def notify(callback: UpdateCallback | None, record: JobRecord) -> None:
    """Tell `callback` (a function or a coroutine function, or None) of the job's record."""
    if callback is None:
        return
    result = callback(record)
    if asyncio.iscoroutine(result):
        await result
