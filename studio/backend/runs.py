"""A Run: many requests from one RunSpec, at most `concurrency` in flight, an async stream of updates.

Per request: wait for a slot in the studio → pick an endpoint → create, poll, download → validate the mp4
→ write the sidecar and the history row → only then report it done.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from studio import tiers
from studio.backend.client import ClientError, JobOutcome, RequestRejected, RequestTimings, ServerUnreachable
from studio.backend.router import EndpointPool, NoEndpointError
from studio.backend.spec import RunSpec
from studio.backend.stats import RequestSample
from studio.backend.store import OutputStore
from studio.media import VideoError, probe_mp4
from studio.protocol import JobRecord, JobStatus, VideoRequest, is_guardrail_block


class RequestState(StrEnum):
    WAITING = "waiting"  # in the studio, for a free slot
    QUEUED = "queued"  # at the server, not started
    RUNNING = "running"
    DOWNLOADING = "downloading"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RequestState.DONE, RequestState.FAILED, RequestState.CANCELLED)


@dataclass
class RequestView:
    """The studio's view of one request; what the page's table and the CLI show."""

    id: str
    run_id: str
    position: int
    request: VideoRequest
    state: RequestState = RequestState.WAITING
    progress: float = 0.0
    job_id: str | None = None
    endpoint: str | None = None
    error: str | None = None
    guardrail_blocked: bool = False
    video_path: Path | None = None
    sidecar_path: Path | None = None
    timings: RequestTimings = field(default_factory=RequestTimings)
    server_progress_is_real: bool = False
    finished_at: float | None = None
    resubmissions: int = 0  # times it was sent again after its server restarted without having started it

    @property
    def tier(self) -> str | None:
        return tiers.tier_of_size(self.request.width, self.request.height)

    @property
    def shape_key(self) -> tuple:
        """Requests of one shape take about as long as each other: the key for estimates."""
        r = self.request
        return (r.width, r.height, r.num_frames, r.num_inference_steps, r.guidance_scale)

    def sample(self) -> RequestSample:
        t = self.timings
        return RequestSample(
            state=str(self.state),
            tier=self.tier,
            created=t.created,
            finished=self.finished_at,
            latency_s=t.latency_s if self.state is RequestState.DONE else None,
            queue_wait_s=t.queue_wait_s,
            inference_s=t.inference_s,
        )

    @property
    def elapsed_s(self) -> float:
        end = self.timings.downloaded or (self.timings.completed if self.state.finished else None)
        return (end or time.time()) - self.timings.created

    @property
    def eta_s(self) -> float | None:
        """Seconds left, from real progress where the server reports it."""
        if self.state is not RequestState.RUNNING or not self.server_progress_is_real or self.progress <= 0:
            return None
        started = self.timings.first_running or self.timings.accepted
        if started is None:
            return None
        running_for = time.time() - started
        return running_for * (100.0 - self.progress) / self.progress

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "position": self.position,
            "prompt": self.request.prompt,
            "size": self.request.size,
            "num_frames": self.request.num_frames,
            "seed": self.request.seed,
            "state": str(self.state),
            "progress": self.progress,
            "job_id": self.job_id,
            "endpoint": self.endpoint,
            "error": self.error,
            "guardrail_blocked": self.guardrail_blocked,
            "resubmissions": self.resubmissions,
            "video_path": str(self.video_path) if self.video_path else None,
            **{k: v for k, v in self.timings.as_dict().items()},
        }


class Run:
    """Executes a RunSpec against an endpoint pool; results go to the store before they are reported."""

    def __init__(
        self,
        spec: RunSpec,
        pool: EndpointPool,
        store: OutputStore,
        request_timeout_s: float = 3600.0,
        requests: list[VideoRequest] | None = None,
        arrivals: list[float] | None = None,
        resumed: list[RequestView] | None = None,
        resubmit_unstarted: bool = False,
        restart_wait_s: float = 1800.0,
    ):
        self.id = f"run_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
        self.spec = spec
        self.pool = pool
        self.store = store
        self.request_timeout_s = request_timeout_s
        self.created_at = time.time()
        self.views = [
            RequestView(id=f"req_{uuid.uuid4().hex[:12]}", run_id=self.id, position=i, request=req)
            for i, req in enumerate(requests if requests is not None else spec.build_requests())
        ]
        # Open loop: request i is released `arrivals[i]` seconds after the run starts (else all at once).
        self.arrivals = arrivals
        # With auto-restart: a request whose server went away before it started waits for the server to come
        # back (at most restart_wait_s) and is sent again; one that had started fails with the reason.
        self.resubmit_unstarted = resubmit_unstarted
        self.restart_wait_s = restart_wait_s
        self._tasks: dict[str, asyncio.Task] = {}
        self._cancel_reasons: dict[str, tuple[RequestState, str]] = {}
        self._updates: asyncio.Queue[RequestView | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(spec.concurrency)
        self._main: asyncio.Task | None = None
        self._listeners: list[Callable[[RequestView], None]] = []
        if resumed is not None:
            # Requests an earlier studio left at a server: already in history, followed up by job id.
            self.views = resumed
            return
        store.add_run(self.id, spec.model_dump(mode="json"), self.created_at)
        for view in self.views:
            store.add_request(
                view.id,
                self.id,
                view.position,
                view.timings.created,
                view.request.prompt,
                view.request.parameters(),
            )

    # ---- control -----------------------------------------------------------------------------------
    def start(self) -> asyncio.Task:
        if self._main is None:
            self._main = asyncio.create_task(self._execute(), name=self.id)
        return self._main

    async def wait(self) -> list[RequestView]:
        await self.start()
        return self.views

    async def updates(self) -> AsyncIterator[RequestView]:
        """Each change of any request, until the run is over."""
        self.start()
        while True:
            view = await self._updates.get()
            if view is None:
                return
            yield view

    def cancel(self, request_id: str, reason: str = "cancelled by the user") -> bool:
        return self._stop(request_id, RequestState.CANCELLED, reason)

    def cancel_all(self, reason: str = "cancelled by the user") -> int:
        return sum(self._stop(view.id, RequestState.CANCELLED, reason) for view in self.views)

    def fail_endpoint(self, url: str, reason: str, started_only: bool = False) -> int:
        """The server behind `url` died: fail what it was working on, with the reason. `started_only`: only
        what it had started (what it only queued is sent again once the server is back)."""
        return sum(
            self._stop(view.id, RequestState.FAILED, reason)
            for view in self.views
            if view.endpoint == url
            and not view.state.finished
            and view.state is not RequestState.WAITING
            and not (started_only and self._never_started(view))
        )

    @staticmethod
    def _never_started(view: RequestView) -> bool:
        return view.state is RequestState.QUEUED and view.timings.first_running is None

    @property
    def finished(self) -> bool:
        return all(view.state.finished for view in self.views)

    def fail_endpoint_threadsafe(self, url: str, reason: str, started_only: bool = False) -> None:
        """fail_endpoint from another thread (a server's exit watcher): runs on the run's own loop."""
        if self._main is not None and not self._main.done():
            self._main.get_loop().call_soon_threadsafe(self.fail_endpoint, url, reason, started_only)

    def _stop(self, request_id: str, state: RequestState, reason: str) -> bool:
        view = next((v for v in self.views if v.id == request_id), None)
        if view is None or view.state.finished:
            return False
        self._cancel_reasons[request_id] = (state, reason)
        task = self._tasks.get(request_id)
        if task is not None and not task.done():
            task.cancel()  # the client DELETEs the job on the server
        return True

    # ---- execution ---------------------------------------------------------------------------------
    async def _execute(self) -> None:
        self._started = time.monotonic()
        # With several endpoints, one that went down is probed while the run lasts and comes back when healthy.
        watcher = asyncio.create_task(self.pool.watch_health()) if len(self.pool.endpoints) > 1 else None
        try:
            for view in self.views:
                self._tasks[view.id] = asyncio.create_task(self._one(view), name=view.id)
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            if watcher is not None:
                watcher.cancel()
            self._updates.put_nowait(None)

    def add_listener(self, listener: Callable[[RequestView], None]) -> None:
        """Called on the run's event loop at every change of a request."""
        self._listeners.append(listener)

    def _emit(self, view: RequestView) -> None:
        self._updates.put_nowait(view)
        for listener in self._listeners:
            listener(view)

    async def _one(self, view: RequestView) -> None:
        try:
            if self.arrivals is not None:
                await asyncio.sleep(max(0.0, self._started + self.arrivals[view.position] - time.monotonic()))
                view.timings.created = time.time()  # latency counts from the arrival
            async with self._slots:
                if view.job_id is not None:
                    await self._follow_up(view)
                else:
                    await self._attempt(view)
        except asyncio.CancelledError:
            state, reason = self._cancel_reasons.get(view.id, (RequestState.CANCELLED, "cancelled"))
            self._finish(view, state, reason)
        except Exception as exc:  # never lose a request: it ends failed with the reason
            self._finish(view, RequestState.FAILED, f"{type(exc).__name__}: {exc}")

    @classmethod
    def resume(
        cls, rows: list[dict[str, Any]], pool: EndpointPool, store: OutputStore, request_timeout_s: float = 3600.0
    ) -> Run:
        """A run that follows up requests of an earlier studio by their job ids (history rows)."""
        views = []
        for row in rows:
            params = {k: v for k, v in (row["parameters"] or {}).items() if k != "input_reference"}
            view = RequestView(
                id=row["id"],
                run_id=row["run_id"],
                position=row["position"],
                request=VideoRequest(**params),
                state=RequestState.QUEUED,
                job_id=row["job_id"],
                endpoint=row["endpoint"],
                timings=RequestTimings(created=row["created_at"]),
            )
            views.append(view)
        spec = RunSpec(prompts=[v.request.prompt for v in views], concurrency=min(256, max(1, len(views))))
        return cls(spec, pool, store, request_timeout_s=request_timeout_s, resumed=views)

    async def _follow_up(self, view: RequestView) -> None:
        endpoint = self.pool.find(view.endpoint or "")
        if endpoint is None:
            self._finish(view, RequestState.FAILED, f"lost: the server {view.endpoint} is gone")
            return
        assert view.job_id is not None
        record = JobRecord(id=view.job_id, status=JobStatus.QUEUED)
        await self._follow_existing(view, endpoint, record, failure_prefix="lost after a studio restart: ")

    async def _attempt(self, view: RequestView) -> None:
        """Send the request; if an endpoint cannot be reached before it accepted the job, try another."""
        tried: set[str] = set()
        while True:
            try:
                endpoint = self.pool.acquire(exclude=tried)
            except NoEndpointError as exc:
                if self.resubmit_unstarted and await self.pool.wait_back(timeout_s=self.restart_wait_s):
                    tried.clear()  # a server came back (restarted): everything may be tried again
                    continue
                self._finish(view, RequestState.FAILED, str(exc) if not tried else f"no server took it: {exc}")
                return
            tried.add(endpoint.url)
            try:
                await self._attempt_on(view, endpoint)
                return
            except ServerUnreachable as exc:
                self.pool.mark_down(endpoint, str(exc))
                if view.job_id is not None:  # accepted, then lost: never run twice
                    if not await self._send_again_after_loss(view, endpoint, exc):
                        return
                    tried.discard(endpoint.url)

    async def _send_again_after_loss(self, view: RequestView, endpoint, exc: ServerUnreachable) -> bool:
        """The server that accepted this request stopped answering. True: it came back without the job, which
        had never started, so the request is to be sent again. False: settled here, either followed to its end
        (the server was only briefly unreachable and still has it) or failed with the reason."""
        if not self.resubmit_unstarted:
            # A managed server's exit watcher fails this request within moments with the better reason (exit
            # code, last log lines) by cancelling this task; only if none comes is "cannot reach" the reason.
            await asyncio.sleep(1.0)
            self._finish(view, RequestState.FAILED, str(exc))
            return False
        back = await self.pool.wait_back([endpoint], timeout_s=self.restart_wait_s)
        if back is None:
            self._finish(view, RequestState.FAILED, f"{exc}; the server did not come back")
            return False
        assert view.job_id is not None
        try:
            record = await endpoint.client.retrieve(view.job_id)
        except RequestRejected as missing:
            if missing.status_code != 404:
                self._finish(view, RequestState.FAILED, f"{exc}; then: {missing}")
                return False
            if not self._never_started(view):
                self._finish(view, RequestState.FAILED, f"{exc}; its server restarted while it ran")
                return False
            view.resubmissions += 1
            view.job_id, view.endpoint, view.state, view.progress = None, None, RequestState.WAITING, 0.0
            view.timings.sent = view.timings.accepted = view.timings.last_queued = None
            self.store.update_request(view.id, state=view.state, job_id=None, endpoint=None)
            self._emit(view)
            return True
        except ClientError as again:
            self._finish(view, RequestState.FAILED, f"{exc}; then: {again}")
            return False
        await self._follow_existing(view, endpoint, record)
        return False

    async def _follow_existing(self, view: RequestView, endpoint, record: JobRecord, failure_prefix: str = "") -> None:
        """Poll a job the server still has to its end, then download and check it (as a first attempt would)."""
        dest = self.store.video_path_for(view.id, view.timings.created)
        ok = False
        self.pool.hold(endpoint)
        try:
            outcome = await endpoint.client.follow(
                record,
                dest,
                on_update=lambda r: self._on_record(view, r),
                timeout_s=self.request_timeout_s,
                timings=view.timings,
            )
            ok = await self._complete(view, outcome)
        except ClientError as again:
            self._finish(view, RequestState.FAILED, f"{failure_prefix}{again}")
        finally:
            self.pool.release(endpoint, ok)

    async def _attempt_on(self, view: RequestView, endpoint) -> None:
        view.endpoint = endpoint.url
        ok = False
        try:
            view.state = RequestState.QUEUED
            self.store.update_request(view.id, state=view.state, endpoint=endpoint.url)
            self._emit(view)
            dest = self.store.video_path_for(view.id, view.timings.created)
            try:
                outcome = await endpoint.client.run(
                    view.request,
                    dest,
                    on_update=lambda record: self._on_record(view, record),
                    timeout_s=self.request_timeout_s,
                    timings=view.timings,
                    on_accepted=lambda record: self._on_accepted(view, record),
                )
            except ServerUnreachable:
                raise
            except ClientError as exc:
                self._finish(view, RequestState.FAILED, str(exc))
                return
            ok = await self._complete(view, outcome)
        finally:
            self.pool.release(endpoint, ok)

    def _on_accepted(self, view: RequestView, record: JobRecord) -> None:
        view.job_id = record.id
        self.store.update_request(view.id, job_id=record.id)

    def _on_record(self, view: RequestView, record: JobRecord) -> None:
        if record.status is JobStatus.IN_PROGRESS:
            view.state = RequestState.RUNNING
            if 0 < record.progress < 100:
                view.server_progress_is_real = True
        elif record.status is JobStatus.COMPLETED:
            view.state = RequestState.DOWNLOADING
        view.progress = float(record.progress)
        self._emit(view)

    async def _complete(self, view: RequestView, outcome: JobOutcome) -> bool:
        if not outcome.ok:
            error = outcome.record.error
            message = (error.message if error else "") or f"job ended {outcome.record.status}"
            view.guardrail_blocked = is_guardrail_block(message)
            code = f" (HTTP {error.code})" if error and error.code else ""
            self._finish(view, RequestState.FAILED, message + code)
            return False
        assert outcome.video_path is not None
        try:
            info = await asyncio.to_thread(probe_mp4, outcome.video_path)
        except VideoError as exc:
            outcome.video_path.unlink(missing_ok=True)
            self._finish(view, RequestState.FAILED, f"the server sent a video that does not play: {exc}")
            return False
        asked = view.request.num_frames
        if asked is not None and info.num_frames != asked:
            outcome.video_path.unlink(missing_ok=True)
            self._finish(
                view,
                RequestState.FAILED,
                f"the server sent a video of {info.num_frames} frames, but {asked} were asked",
            )
            return False
        sidecar = {
            "request_id": view.id,
            "run_id": self.id,
            "job_id": outcome.record.id,
            "endpoint": view.endpoint,
            "parameters": view.request.parameters(),
            "seed": view.request.seed,
            "timings": view.timings.as_dict(),
            "job": outcome.record.model_dump(mode="json"),
            "video": {
                "width": info.width,
                "height": info.height,
                "num_frames": info.num_frames,
                "fps": info.fps,
                "codec": info.codec,
                "pix_fmt": info.pix_fmt,
                "bytes": info.bytes,
            },
        }
        view.sidecar_path = self.store.write_sidecar(outcome.video_path, sidecar)
        view.video_path = outcome.video_path
        view.progress = 100.0
        self._finish(view, RequestState.DONE, None)
        return True

    def _finish(self, view: RequestView, state: RequestState, error: str | None) -> None:
        view.state, view.error, view.finished_at = state, error, time.time()
        try:
            self.store.update_request(
                view.id,
                state=state,
                error=error,
                timings=view.timings.as_dict(),
                video_path=view.video_path,
                sidecar_path=view.sidecar_path,
            )
        except sqlite3.Error as exc:  # e.g. the disk is full: still report the outcome, and say what is missing
            view.error = f"{error or ''} (history not saved: {exc})".strip()
        self._emit(view)
