"""A Run: many requests from one RunSpec, at most `concurrency` in flight, an async stream of updates.

Its face is what other threads and the page call: start, wait, updates, listeners, cancel, fail an endpoint, move a
request. The cancels, fail_endpoint_threadsafe and move_threadsafe may be called from any thread: where the run goes
on another thread's event loop, the change is handed to that loop. On that loop the run schedules its requests: each
in turn takes a slot of the run (its `concurrency`) and a task, which hands it to the run's RequestSender
(sending.py: a slot of the studio's → endpoint → create, poll, download → recover → keep the video → done) and
settles it whatever happens. A request's states are in request_state.py.

Only the requests that hold a slot of their run have a task; the others wait their turn as views, in order. So a run
of thousands costs the event loop no more than its concurrency does, and cancelling it settles the requests it never
started at once, with one history write made in a worker thread: time in proportion to the run, the loop free
meanwhile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.fair_share import FairShare
from studio.backend.runs.recorder import RunRecorder
from studio.backend.runs.recovery import views_from_history
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.sending import RequestSender
from studio.backend.runs.spec import MAX_CONCURRENCY, RunSpec
from studio.backend.runs.store import NewRequest, OutputsFull, OutputStore
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.protocol import VideoRequest

# Requests settled together are told of this many at a time, the event loop free for others in between.
EMIT_CHUNK = 500


def _outcome(view: RequestView) -> dict[str, Any]:
    """A finished request's history columns (as recorder.finished writes them)."""
    return {
        "state": view.state,
        "error": view.error,
        "timings": view.timings.as_dict(),
        "video_path": view.video_path,
        "sidecar_path": view.sidecar_path,
    }


# How long a move handed to another thread's loop is waited for (it is a swap in a list).
MOVE_WAIT_S = 5.0


class _SenderSetting:
    """A setting of how the run's requests are sent: kept by its sender alone, read and set through the run, so
    that a change (auto-restart switched while the run goes on) applies to the requests under way too."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, run: Run | None, owner: type | None = None) -> Any:
        return self if run is None else getattr(run._sender, self.name)

    def __set__(self, run: Run, value: Any) -> None:
        setattr(run._sender, self.name, value)


class Run:
    """Executes a RunSpec against an endpoint pool; results go to the store before they are reported."""

    # With auto-restart: a request whose server went away before it started waits for the server to come back (at
    # most restart_wait_s) and is sent again; one that had started fails with the reason.
    resubmit_unstarted = _SenderSetting()
    restart_wait_s = _SenderSetting()
    server_wait_s = _SenderSetting()
    request_timeout_s = _SenderSetting()

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
        self.created_at = time.time()
        self.views = [
            RequestView(
                id=f"req_{uuid.uuid4().hex[:12]}", run_id=self.id, position=i, request=req, visitor_id=visitor.id
            )
            for i, req in enumerate(requests if requests is not None else spec.build_requests())
        ]
        # Open loop: request i is released `arrivals[i]` seconds after the run starts (else all at once).
        self.arrivals = arrivals
        # Each request's way from a slot of the studio's to its end; it tells of every change through _emit.
        self._sender = RequestSender(
            pool,
            store,
            self.recorder,
            self._emit,
            visitor=visitor,
            dispatcher=dispatcher,
            request_timeout_s=request_timeout_s,
            resubmit_unstarted=resubmit_unstarted,
            restart_wait_s=restart_wait_s,
            server_wait_s=server_wait_s,
        )
        self._tasks: dict[str, asyncio.Task] = {}  # of the requests that took a slot of the run
        self._scanned = 0  # where _next_to_start looks first: every request before it is started or settled
        self._arrival_queue: list[RequestView] | None = None  # at a request rate: those still to arrive, last first
        self._cancel_reasons: dict[str, tuple[RequestState, str]] = {}
        self._updates: asyncio.Queue[RequestView | None] = asyncio.Queue()
        self._followed = False  # whether anyone has read its updates: else they are let go when it ends
        self._slots = asyncio.Semaphore(spec.concurrency)
        self._main: asyncio.Task | None = None
        self._listeners: list[Callable[[RequestView], None]] = []
        self._writes: set[asyncio.Task] = set()  # history writes under way of requests settled together
        if resumed is not None:
            # Requests an earlier studio left at a server: already in history, followed up by job id.
            self.views = resumed
        else:
            # The run and all its requests in one transaction: on a full disk, none of it (OutputsFull).
            self.store.add_run(
                self.id,
                spec.model_dump(mode="json"),
                self.created_at,
                visitor.id,
                requests=[
                    NewRequest(v.id, v.position, v.timings.created, v.request.prompt, v.request.parameters())
                    for v in self.views
                ],
            )
        self._by_id = {view.id: view for view in self.views}

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

    # ---- the face: what other threads and the page call -----------------------------------------------
    def start(self) -> asyncio.Task:
        if self._main is None:
            # In a context of its own: the caller's (a page event's, which holds its HTTP request and connection)
            # would live as long as the run is kept.
            self._main = asyncio.create_task(self._execute(), name=self.id, context=contextvars.Context())
        return self._main

    async def wait(self) -> list[RequestView]:
        """Until the run is over; from any event loop (a run the controller follows up runs on its own)."""
        main = self.start()
        if main.get_loop() is asyncio.get_running_loop():
            await main
            return self.views
        ended: concurrent.futures.Future[None] = concurrent.futures.Future()

        def watch() -> None:
            if main.done():
                ended.set_result(None)
            else:
                main.add_done_callback(lambda _: ended.set_result(None))

        with contextlib.suppress(RuntimeError):  # its loop is closed: the run is over
            main.get_loop().call_soon_threadsafe(watch)
            await asyncio.wrap_future(ended)
        return self.views

    async def updates(self) -> AsyncIterator[RequestView]:
        """Each change of any request, until the run is over (from its start, where read before it ended)."""
        self._followed = True
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
        view = self._by_id.get(request_id)
        if view is None or view.state.finished:
            return False
        return self._on_own_loop(lambda: self._stop_many([view], RequestState.CANCELLED, reason), lambda: 1) > 0

    def cancel_all(self, reason: str = "cancelled by the user") -> int:
        def stop() -> int:
            return self._stop_many(self.views, RequestState.CANCELLED, reason)

        return self._on_own_loop(stop, lambda: sum(1 for view in self.views if not view.state.finished))

    def cancel_unsent(self, reason: str = "cancelled: its page was closed") -> int:
        """Cancel the requests not yet sent to a server; those sent carry on."""

        def stop() -> int:
            unsent = [view for view in self.views if view.state is RequestState.WAITING]
            return self._stop_many(unsent, RequestState.CANCELLED, reason)

        return self._on_own_loop(stop, lambda: self.unsent)

    @property
    def unsent(self) -> int:
        """Requests waiting in the studio, not yet at a server."""
        return sum(1 for view in self.views if view.state is RequestState.WAITING)

    def fail_endpoint(self, url: str, reason: str, started_only: bool = False) -> int:
        """The server behind `url` died: fail what it was working on, with the reason. `started_only`: only
        what it had started (what it only queued is sent again once the server is back)."""
        return self._stop_many(
            [
                view
                for view in self.views
                if view.endpoint == url
                and not view.state.finished
                and view.state is not RequestState.WAITING
                and not (started_only and view.never_started)
            ],
            RequestState.FAILED,
            reason,
        )

    def fail_endpoint_threadsafe(self, url: str, reason: str, started_only: bool = False) -> None:
        """fail_endpoint from another thread (a server's exit watcher): runs on the run's own loop."""
        if self._main is not None and not self._main.done():
            self._main.get_loop().call_soon_threadsafe(self.fail_endpoint, url, reason, started_only)

    @property
    def finished(self) -> bool:
        return all(view.state.finished for view in self.views)

    def movable(self, view: RequestView) -> bool:
        """Not yet started (it waits for a slot of the run), in a run whose order is the user's (closed loop)."""
        return self.arrivals is None and view.state is RequestState.WAITING and view.id not in self._tasks

    def move_threadsafe(self, request_id: str, later: bool) -> str | None:
        """move, from any thread: on the run's own event loop (a moment's wait where that is another thread's)."""
        main = self._main
        if main is None or main.done():
            return self.move(request_id, later)
        loop = main.get_loop()
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            return self.move(request_id, later)
        moved: concurrent.futures.Future[str | None] = concurrent.futures.Future()
        loop.call_soon_threadsafe(lambda: moved.set_result(self.move(request_id, later)))
        return moved.result(timeout=MOVE_WAIT_S)

    def move(self, request_id: str, later: bool) -> str | None:
        """Move a request not yet started one place earlier or later among the run's requests not yet started
        (they start in that order); None where it moved, else why not. On the run's event loop."""
        view = self._by_id.get(request_id)
        if view is None or not self.movable(view):
            return "only a request that has not started yet can be moved"
        index = self.views.index(view)
        step = 1 if later else -1
        other = index + step
        while 0 <= other < len(self.views) and not self.movable(self.views[other]):
            other += step
        if not 0 <= other < len(self.views):
            return f"it is the {'last' if later else 'first'} of the run's requests waiting to start"
        self.views[index], self.views[other] = self.views[other], self.views[index]
        self._scanned = min(self._scanned, index, other)
        self._emit(view)
        return None

    def _on_own_loop(self, action: Callable[[], int], expected: Callable[[], int]) -> int:
        """`action` here, where this thread may act on the run (it runs on this thread's loop, or on none yet);
        else handed to the run's loop, and what it is expected to count (as things stand now) returned."""
        main = self._main
        if main is None or main.done():
            return action()
        loop = main.get_loop()
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            return action()
        count = expected()
        try:
            loop.call_soon_threadsafe(action)
        except RuntimeError:  # its loop closed meanwhile: nothing runs there any more
            return action()
        return count

    # ---- the scheduling, on the run's event loop ------------------------------------------------------
    async def _execute(self) -> None:
        self._started = time.monotonic()
        started_at = time.time()
        try:
            # An endpoint that went down is probed while the run lasts and comes back when healthy.
            async with self.pool.health_watched():
                while (view := self._next_to_start()) is not None:
                    if self.arrivals is not None:
                        # Open loop: released `arrivals[i]` seconds after the run started; latency counts from then,
                        # also while the run's slots are all taken.
                        offset = self.arrivals[view.position]
                        await asyncio.sleep(max(0.0, self._started + offset - time.monotonic()))
                        view.timings.created = started_at + offset
                    await self._slots.acquire()
                    if view.state.finished:
                        self._slots.release()
                        continue
                    task = asyncio.create_task(self._drive(view), name=view.id)
                    self._tasks[view.id] = task
                    task.add_done_callback(functools.partial(self._ended, view))
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
                while self._writes:
                    await asyncio.gather(*self._writes, return_exceptions=True)
        finally:
            if not self._followed:
                # Nobody reads them: a run kept for the page would otherwise hold one entry per change.
                self._updates = asyncio.Queue()
            self._updates.put_nowait(None)

    def _next_to_start(self) -> RequestView | None:
        """The next request to take a slot of the run: in a closed loop, the first in the run's order (which the
        visitor may change: move) still waiting and not started; at a request rate, the next to arrive."""
        if self.arrivals is not None:
            if self._arrival_queue is None:
                arrivals = self.arrivals
                self._arrival_queue = sorted(self.views, key=lambda view: arrivals[view.position], reverse=True)
            while self._arrival_queue:
                view = self._arrival_queue.pop()
                if not view.state.finished:  # cancelled before its turn came
                    return view
            return None
        for index in range(self._scanned, len(self.views)):
            view = self.views[index]
            # Not started and not settled: waiting in the studio, or (an earlier studio's) queued at its server.
            if view.id not in self._tasks and not view.state.finished:
                self._scanned = index  # those before it are started or settled: never looked at again
                return view
        self._scanned = len(self.views)
        return None

    async def _drive(self, view: RequestView) -> None:
        """One request from its turn to its end (it holds a slot of the run): the sender sees it through;
        whatever happens, it ends finished with a reason."""
        try:
            await self._sender.deliver(view)
        except asyncio.CancelledError:
            state, reason = self._cancel_reasons.get(view.id, (RequestState.CANCELLED, "cancelled"))
            if not view.state.finished:
                self._sender.finish(view, state, reason)
        except Exception as exc:  # never lose a request: it ends failed with the reason
            if not view.state.finished:
                self._sender.finish(view, RequestState.FAILED, f"{type(exc).__name__}: {exc}")

    def _ended(self, view: RequestView, _task: asyncio.Task) -> None:
        """A request's task is over: its slot goes to the next request. One cancelled before its task began is
        settled here."""
        self._slots.release()
        if not view.state.finished:
            state, reason = self._cancel_reasons.get(view.id, (RequestState.CANCELLED, "cancelled"))
            self._sender.finish(view, state, reason)

    def _emit(self, view: RequestView) -> None:
        self._updates.put_nowait(view)
        for listener in self._listeners:
            listener(view)

    def _stop_many(self, views: list[RequestView], state: RequestState, reason: str) -> int:
        """Stop these requests (those not finished): one that holds no slot of the run is settled now, all of them
        together in one history write; one under way has its task cancelled (the client DELETEs its job on the
        server) and is settled by it. Returns how many it stopped."""
        stopped = 0
        settled = []
        for view in views:
            if view.state.finished:
                continue
            stopped += 1
            task = self._tasks.get(view.id)
            if task is None:  # the run has not started it: it never will
                view.finish(state, reason)
                settled.append(view)
            elif not task.done():
                self._cancel_reasons[view.id] = (state, reason)
                task.cancel()
        if settled:
            self._settle(settled)
        return stopped

    def _settle(self, views: list[RequestView]) -> None:
        """Record requests finished together, then tell of them: on an event loop, the write goes to a worker
        thread (one transaction), and they are told of once it is done; without one, here and now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._record_settled(views)
            for view in views:
                self._emit(view)
            return
        write = loop.create_task(self._settle_off_loop(views), name=f"{self.id}-settle")
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _settle_off_loop(self, views: list[RequestView]) -> None:
        await asyncio.to_thread(self._record_settled, views)
        for start in range(0, len(views), EMIT_CHUNK):
            if start:
                await asyncio.sleep(0)  # the loop serves others between chunks
            for view in views[start : start + EMIT_CHUNK]:
                self._emit(view)

    def _record_settled(self, views: list[RequestView]) -> None:
        try:
            self.store.finish_requests([(view.id, _outcome(view)) for view in views])
        except (sqlite3.Error, OutputsFull) as exc:  # still report the outcome, and say what is missing
            for view in views:
                view.error = f"{view.error or ''} (history not saved: {exc})".strip()
