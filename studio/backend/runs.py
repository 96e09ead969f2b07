"""A Run: many requests from one RunSpec, at most `concurrency` in flight, an async stream of updates.

Per request: wait for a slot of its run (its `concurrency`), then for one of the studio's, shared fairly across
visitors (fair_share.py; a run made without a dispatcher has only its own) → pick an endpoint → create, poll, download → keep the video (checked,
sidecar and history row written: recorder.py) → only then report it done. A request's states are in
request_state.py; what becomes of one whose server went away, in recovery.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from studio.backend.client import ClientError, JobOutcome, ServerUnreachable
from studio.backend.fair_share import FairShare
from studio.backend.recorder import RunRecorder
from studio.backend.recovery import Recovery, after_loss, follow_up, views_from_history
from studio.backend.request_state import RequestState, RequestView
from studio.backend.router import Endpoint, EndpointPool, NoEndpointError
from studio.backend.spec import MAX_CONCURRENCY, RunSpec
from studio.backend.store import OutputStore
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.protocol import JobRecord, VideoRequest


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
        visitor: Visitor = LOCAL_OPERATOR,
        dispatcher: FairShare | None = None,
        server_wait_s: float = 0.0,
    ):
        """`dispatcher`: the studio's in-flight slots, shared with its other runs. `server_wait_s`: how long a
        request waits for a server when none is up (one that went down comes back once it answers again)."""
        self.id = f"run_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
        self.spec = spec
        self.pool = pool
        self.store = store
        self.recorder = RunRecorder(store, self.id)
        self.visitor = visitor
        self.dispatcher = dispatcher
        self.server_wait_s = server_wait_s
        self.request_timeout_s = request_timeout_s
        self.created_at = time.time()
        self.views = [
            RequestView(
                id=f"req_{uuid.uuid4().hex[:12]}", run_id=self.id, position=i, request=req, visitor_id=visitor.id
            )
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
        self.recorder.add_run(spec.model_dump(mode="json"), self.created_at, self.views, visitor.id)

    @classmethod
    def resume(
        cls,
        rows: list[dict[str, Any]],
        pool: EndpointPool,
        store: OutputStore,
        request_timeout_s: float = 3600.0,
        visitor: Visitor = LOCAL_OPERATOR,
    ) -> Run:
        """A run of `visitor`'s that follows up their requests of an earlier studio by job id (history rows)."""
        views = views_from_history(rows)
        spec = RunSpec(prompts=[v.request.prompt for v in views], concurrency=min(MAX_CONCURRENCY, max(1, len(views))))
        return cls(spec, pool, store, request_timeout_s=request_timeout_s, resumed=views, visitor=visitor)

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

    def add_listener(self, listener: Callable[[RequestView], None]) -> None:
        """Called on the run's event loop at every change of a request."""
        self._listeners.append(listener)

    def cancel(self, request_id: str, reason: str = "cancelled by the user") -> bool:
        return self._stop(request_id, RequestState.CANCELLED, reason)

    def cancel_all(self, reason: str = "cancelled by the user") -> int:
        return sum(self._stop(view.id, RequestState.CANCELLED, reason) for view in self.views)

    def cancel_unsent(self, reason: str = "cancelled: its page was closed") -> int:
        """Cancel the requests not yet sent to a server; those sent carry on."""
        unsent = [view.id for view in self.views if view.state is RequestState.WAITING]
        return sum(self._stop(request_id, RequestState.CANCELLED, reason) for request_id in unsent)

    @property
    def unsent(self) -> int:
        """Requests waiting in the studio, not yet at a server."""
        return sum(1 for view in self.views if view.state is RequestState.WAITING)

    def fail_endpoint(self, url: str, reason: str, started_only: bool = False) -> int:
        """The server behind `url` died: fail what it was working on, with the reason. `started_only`: only
        what it had started (what it only queued is sent again once the server is back)."""
        return sum(
            self._stop(view.id, RequestState.FAILED, reason)
            for view in self.views
            if view.endpoint == url
            and not view.state.finished
            and view.state is not RequestState.WAITING
            and not (started_only and view.never_started)
        )

    def fail_endpoint_threadsafe(self, url: str, reason: str, started_only: bool = False) -> None:
        """fail_endpoint from another thread (a server's exit watcher): runs on the run's own loop."""
        if self._main is not None and not self._main.done():
            self._main.get_loop().call_soon_threadsafe(self.fail_endpoint, url, reason, started_only)

    @property
    def finished(self) -> bool:
        return all(view.state.finished for view in self.views)

    def _stop(self, request_id: str, state: RequestState, reason: str) -> bool:
        view = next((v for v in self.views if v.id == request_id), None)
        if view is None or view.state.finished:
            return False
        self._cancel_reasons[request_id] = (state, reason)
        task = self._tasks.get(request_id)
        if task is None:  # the run has not started it: it never will
            self._finish(view, state, reason)
        elif not task.done():
            task.cancel()  # the client DELETEs the job on the server
        return True

    # ---- execution ---------------------------------------------------------------------------------
    async def _execute(self) -> None:
        self._started = time.monotonic()
        try:
            # An endpoint that went down is probed while the run lasts and comes back when healthy.
            async with self.pool.health_watched():
                for view in self.views:
                    if not view.state.finished:  # cancelled before the run started
                        self._tasks[view.id] = asyncio.create_task(self._drive(view), name=view.id)
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            self._updates.put_nowait(None)

    def _emit(self, view: RequestView) -> None:
        self._updates.put_nowait(view)
        for listener in self._listeners:
            listener(view)

    async def _drive(self, view: RequestView) -> None:
        """One request from its arrival to its end; whatever happens, it ends finished with a reason."""
        try:
            if self.arrivals is not None:
                await asyncio.sleep(max(0.0, self._started + self.arrivals[view.position] - time.monotonic()))
                view.timings.created = time.time()  # latency counts from the arrival
            async with self._slots, self._studio_slot():
                if view.job_id is not None:  # left at a server by an earlier studio
                    await self._recover(view, follow_up(view, self.pool))
                else:
                    await self._send(view)
        except asyncio.CancelledError:
            state, reason = self._cancel_reasons.get(view.id, (RequestState.CANCELLED, "cancelled"))
            self._finish(view, state, reason)
        except Exception as exc:  # never lose a request: it ends failed with the reason
            self._finish(view, RequestState.FAILED, f"{type(exc).__name__}: {exc}")

    def _studio_slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.dispatcher.slot(self.visitor) if self.dispatcher is not None else contextlib.nullcontext()

    async def _send(self, view: RequestView) -> None:
        """Send the request; if an endpoint cannot be reached before it accepted the job, try another."""
        tried: set[str] = set()
        while True:
            try:
                endpoint = self.pool.acquire(exclude=tried)
            except NoEndpointError as exc:
                waited = await self._wait_for_server(view, exc)
                if waited is None:
                    tried.clear()  # a server came back: everything may be tried again
                    continue
                self._finish(view, RequestState.FAILED, waited if not tried else f"no server took it: {waited}")
                return
            tried.add(endpoint.url)
            try:
                await self._send_to(view, endpoint)
                return
            except ServerUnreachable as exc:
                self.pool.mark_down(endpoint, str(exc))
                if view.job_id is not None:  # accepted, then lost: never run twice
                    recovery = await after_loss(
                        view, endpoint, self.pool, exc, self.resubmit_unstarted, self.restart_wait_s
                    )
                    if not await self._recover(view, recovery):
                        return
                    tried.discard(endpoint.url)

    async def _wait_for_server(self, view: RequestView, none_up: NoEndpointError) -> str | None:
        """No server is up: wait for one to come back (through a restart, with auto-restart; else at most
        server_wait_s), saying so in the request meanwhile. None once one is back, else why the request fails."""
        restart_s = self.restart_wait_s if self.resubmit_unstarted else 0.0
        wait_s = max(restart_s, self.server_wait_s)
        if wait_s <= 0:
            return str(none_up)
        view.error = f"{none_up}; waiting up to {wait_s:.0f} s for it to come back"
        self._emit(view)
        # A server that is not restarting is given server_wait_s to answer its health check again.
        back = await self.pool.wait_back(timeout_s=wait_s, grace_s=max(5.0, self.server_wait_s))
        view.error = None
        return None if back is not None else f"{none_up}; none came back within {wait_s:.0f} s"

    async def _send_to(self, view: RequestView, endpoint: Endpoint) -> None:
        """Create the job on `endpoint` (already acquired) and see it through. Raises ServerUnreachable where
        the endpoint cannot be reached, for the caller to try elsewhere or recover."""

        def create() -> Awaitable[JobOutcome]:
            view.send_to(endpoint.url)
            self.recorder.sent(view)
            self._emit(view)
            return endpoint.client.run(
                view.request,
                self.store.video_path_for(view.id, view.timings.created),
                on_update=lambda record: self._track(view, record),
                timeout_s=self.request_timeout_s,
                timings=view.timings,
                on_accepted=lambda record: self._accept(view, record),
            )

        await self._see_through(view, endpoint, create, unreachable_raises=True)

    async def _recover(self, view: RequestView, recovery: Recovery) -> bool:
        """Act on a recovery. True: the request is to be sent again; False: it is settled here."""
        if recovery.follow is not None:
            endpoint, record = recovery.follow
            self.pool.hold(endpoint)
            await self._see_through(
                view,
                endpoint,
                lambda: endpoint.client.follow(
                    record,
                    self.store.video_path_for(view.id, view.timings.created),
                    on_update=lambda update: self._track(view, update),
                    timeout_s=self.request_timeout_s,
                    timings=view.timings,
                ),
                failure_prefix=recovery.failure_prefix,
            )
            return False
        if recovery.resend:
            view.requeue()
            self.recorder.requeued(view)
            self._emit(view)
            return True
        self._finish(view, RequestState.FAILED, recovery.failure)
        return False

    async def _see_through(
        self,
        view: RequestView,
        endpoint: Endpoint,
        start_job: Callable[[], Awaitable[JobOutcome]],
        failure_prefix: str = "",
        unreachable_raises: bool = False,
    ) -> None:
        """Start a job on `endpoint` (the request already counted there), await its outcome and settle the
        request; the endpoint's count is released with the result, whatever happens."""
        ok = False
        try:
            try:
                outcome = await start_job()
            except ClientError as exc:
                if unreachable_raises and isinstance(exc, ServerUnreachable):
                    raise
                self._finish(view, RequestState.FAILED, f"{failure_prefix}{exc}")
                return
            ok = await self._complete(view, outcome)
        finally:
            self.pool.release(endpoint, ok)

    def _accept(self, view: RequestView, record: JobRecord) -> None:
        view.accept(record.id)
        self.recorder.accepted(view)

    def _track(self, view: RequestView, record: JobRecord) -> None:
        view.track(record)
        self._emit(view)

    async def _complete(self, view: RequestView, outcome: JobOutcome) -> bool:
        """Keep the video of a job that ended (or fail with the reason); True when the request is done."""
        if outcome.ok:
            failure = await self.recorder.keep_video(view, outcome)
        else:
            failure = view.job_failure(outcome.record)
        self._finish(view, RequestState.DONE if failure is None else RequestState.FAILED, failure)
        return failure is None

    def _finish(self, view: RequestView, state: RequestState, error: str | None) -> None:
        view.finish(state, error)
        self.recorder.finished(view)  # before anyone hears of it
        self._emit(view)
