"""One job against one server: create, poll, download, cancel, through the openai SDK's videos API.

A failed job is a result (the server answers with the job's error code and the job JSON); a transport
failure or a rejected request is an error. Every step is timestamped so queue wait and inference time can
be told apart. What every client shares, whatever its server's contract (the base class, the errors, the timings),
is studio.backend.clients.base.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from studio.backend.clients.base import (
    ClientError,
    JobOutcome,
    JobTimeout,
    RequestRejected,
    RequestTimings,
    ServerClient,
    ServerUnreachable,
    UpdateCallback,
    notify,
    save_stream,
)
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
