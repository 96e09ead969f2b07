"""One request of a run, from its turn to its end: the sending path a Run's task follows on the run's event loop.

Wait for one of the studio's in-flight slots, shared fairly across visitors (fair_share.py; a run made without a
dispatcher has only its own) → pick an endpoint → create, poll, download → keep the video (checked, sidecar and
history row written: recorder.py) → only then report it done. An endpoint that cannot be reached before it accepted
the job is left for another; a request whose server went away after it did is recovered (recovery.py): followed to
its end, sent again, or failed with the reason.

The sender keeps no request of its own: each call is given its RequestView, and every change of one is recorded and
told through the run's `emit` (the run's updates and listeners). Which requests go, when, and what cancels them is
the run's (run.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from studio.backend.clients.base import ClientError, JobOutcome, ServerUnreachable
from studio.backend.clients.router import Endpoint, EndpointPool, NoEndpointError
from studio.backend.runs.fair_share import FairShare
from studio.backend.runs.recorder import RunRecorder
from studio.backend.runs.recovery import Recovery, after_loss, follow_up
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.store import OutputStore
from studio.backend.visitors import Visitor
from studio.protocol import JobRecord


class RequestSender:
    """Sends a run's requests to its endpoint pool, one call per request, and settles each with its outcome."""

    def __init__(
        self,
        pool: EndpointPool,
        store: OutputStore,
        recorder: RunRecorder,
        emit: Callable[[RequestView], None],
        visitor: Visitor,
        dispatcher: FairShare | None,
        request_timeout_s: float,
        resubmit_unstarted: bool,
        restart_wait_s: float,
        server_wait_s: float,
    ):
        """`emit`: tells of a request's change (once it is recorded). The settings are read at each use, so that
        one changed while the run goes on (auto-restart: resubmit_unstarted) applies to the requests under way."""
        self.pool = pool
        self.store = store
        self.recorder = recorder
        self.emit = emit
        self.visitor = visitor
        self.dispatcher = dispatcher
        self.request_timeout_s = request_timeout_s
        self.resubmit_unstarted = resubmit_unstarted
        self.restart_wait_s = restart_wait_s
        self.server_wait_s = server_wait_s

    async def deliver(self, view: RequestView) -> None:
        """One request from its studio slot to its end. Raises what stopped it (CancelledError where its task was
        cancelled, anything unforeseen): the caller settles it then."""
        async with self._studio_slot():
            if view.job_id is not None:  # left at a server by an earlier studio
                await self._recover(view, follow_up(view, self.pool.latest()))
            else:
                await self._send(view)

    def finish(self, view: RequestView, state: RequestState, error: str | None) -> None:
        view.finish(state, error)
        self.recorder.finished(view)  # before anyone hears of it
        self.emit(view)

    def _studio_slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.dispatcher.slot(self.visitor) if self.dispatcher is not None else contextlib.nullcontext()

    async def _send(self, view: RequestView) -> None:
        """Send the request; if an endpoint cannot be reached before it accepted the job, try another."""
        tried: set[str] = set()
        while True:
            pool = self.pool.latest()  # where the fleet was started anew since the run began, its new servers
            try:
                endpoint = pool.acquire(exclude=tried)
            except NoEndpointError as exc:
                waited = await self._wait_for_server(view, pool, exc)
                if waited is None:
                    tried.clear()  # a server came back: everything may be tried again
                    continue
                self.finish(view, RequestState.FAILED, waited if not tried else f"no server took it: {waited}")
                return
            tried.add(endpoint.url)
            try:
                await self._send_to(view, endpoint)
                return
            except ServerUnreachable as exc:
                pool.mark_down(endpoint, str(exc))
                if view.job_id is None:  # it never reached the server: back to waiting in the studio
                    view.unsend()
                    self.recorder.requeued(view)
                    self.emit(view)
                    continue
                # Accepted, then lost: never run twice.
                recovery = await after_loss(view, endpoint, pool, exc, self.resubmit_unstarted, self.restart_wait_s)
                if not await self._recover(view, recovery):
                    return
                tried.discard(endpoint.url)

    async def _wait_for_server(self, view: RequestView, pool: EndpointPool, none_up: NoEndpointError) -> str | None:
        """No server of `pool` is up: wait for one to come back (through a restart, with auto-restart; else at most
        server_wait_s), or for the pool to be handed over to a fleet started anew, saying so in the request
        meanwhile. None once one is back (or the pool was handed over), else why the request fails."""
        restart_s = self.restart_wait_s if self.resubmit_unstarted else 0.0
        wait_s = max(restart_s, self.server_wait_s)
        if wait_s <= 0:
            return str(none_up)
        view.error = f"{none_up}; waiting up to {wait_s:.0f} s for it to come back"
        self.emit(view)
        # A server that is not restarting is given server_wait_s to answer its health check again.
        back = await pool.wait_back(timeout_s=wait_s, grace_s=max(5.0, self.server_wait_s))
        view.error = None
        if back is not None or pool.latest() is not pool:
            return None
        return f"{none_up}; none came back within {wait_s:.0f} s"

    async def _send_to(self, view: RequestView, endpoint: Endpoint) -> None:
        """Create the job on `endpoint` (already acquired) and see it through. Raises ServerUnreachable where
        the endpoint cannot be reached, for the caller to try elsewhere or recover."""

        def create() -> Awaitable[JobOutcome]:
            view.send_to(endpoint.url)
            self.recorder.sent(view)
            self.emit(view)

            return endpoint.client.run(
                view.request,
                self.store.video_path_for(view.id, view.timings.created),
                on_update=lambda record: self._track(view, record),
                timeout_s=self.request_timeout_s,
                timings=view.timings,
                on_accepted=lambda record: self._accept(view, record),
                on_event=view.job_event,
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
                    on_event=view.job_event,
                ),
                failure_prefix=recovery.failure_prefix,
            )
            return False
        if recovery.resend:
            view.requeue()
            self.recorder.requeued(view)
            self.emit(view)
            return True
        self.finish(view, RequestState.FAILED, recovery.failure)
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
                self.finish(view, RequestState.FAILED, f"{failure_prefix}{exc}")
                return
            ok = await self._complete(view, outcome)
        finally:
            self.pool.release(endpoint, ok)

    def _accept(self, view: RequestView, record: JobRecord) -> None:
        view.accept(record.id)
        self.recorder.accepted(view)

    def _track(self, view: RequestView, record: JobRecord) -> None:
        view.track(record)
        self.emit(view)

    async def _complete(self, view: RequestView, outcome: JobOutcome) -> bool:
        """Keep the video of a job that ended (or fail with the reason); True when the request is done."""
        if outcome.ok:
            failure = await self.recorder.keep_video(view, outcome)
        else:
            failure = view.job_failure(outcome.record)
        self.finish(view, RequestState.DONE if failure is None else RequestState.FAILED, failure)
        return failure is None
