"""Every request of this studio session in one place: the page's table, gallery, figures and cancel.

Fed by the runs' listeners (on the event loop that runs them); read by the page's timer. A version counter
lets readers skip work when nothing changed. Each update costs the same however many requests there are: a run of
thousands cancelled at once is as many constant-time updates. Readers pass a visitor to see only theirs (None: everyone's, for
operators); cancelling another visitor's request takes an operator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from studio.backend.runs import eta
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.stats import LatencySummary, summarize
from studio.backend.visitors import LOCAL_OPERATOR, Visitor


class NotYours(PermissionError):
    """A visitor tried to act on another visitor's request."""


def _server_s(view: RequestView) -> float | None:
    """What a request took at its server: its inference time, or where the server cannot tell it apart from its
    queue (one that answers only once the video is made), its latency."""
    return view.timings.inference_s or view.timings.latency_s


def _theirs(view: RequestView, visitor: Visitor | None) -> bool:
    return visitor is None or view.visitor_id == visitor.id


@dataclass(frozen=True)
class Progress:
    percent: float
    eta_s: float | None
    estimated: bool  # True where the server gives no real progress and the studio estimates it


# A studio serves for days: the board keeps the newest finished runs in memory (the page's table, gallery and figures
# of the session), History keeps every one. Runs under way are always kept.
MAX_FINISHED_RUNS = 500


class RequestBoard:
    def __init__(self, max_finished_runs: int = MAX_FINISHED_RUNS) -> None:
        self.runs: list[Run] = []
        self.version = 0
        self.max_finished_runs = max_finished_runs
        self.finished_order: list[RequestView] = []  # in the order they finished
        # Requests and runs that have ended since the studio started (the board forgets the oldest, these never go
        # down): what the page compares to know that something ended.
        self.finished_count = 0
        self.finished_runs_count = 0
        self._finished_ids: set[str] = set()  # of those: one look-up, not a walk through the list
        self._unfinished: dict[str, int] = {}  # run id -> its requests not yet ended (each update costs the same)
        self.step_rates = eta.StepRates()  # seconds per step by shape, of the requests done: estimates' base
        self._names: dict[str, str] = {}  # visitor id -> the name they go by: what an owner column shows

    def add_run(self, run: Run) -> None:
        run.add_listener(self._on_update)
        self.runs.append(run)
        self._unfinished[run.id] = sum(1 for view in run.views if not view.state.finished)
        self._names[run.visitor.id] = run.visitor.name
        self._forget_oldest_finished()
        self.version += 1

    def _on_update(self, view: RequestView) -> None:
        self.version += 1
        if view.state.finished and view.id not in self._finished_ids:
            self._finished_ids.add(view.id)
            self.finished_order.append(view)
            self.finished_count += 1
            if view.state is RequestState.DONE:
                self._measured(view)
            left = self._unfinished.get(view.run_id)
            if left:
                self._unfinished[view.run_id] = left - 1
                if left == 1:
                    self.finished_runs_count += 1

    def _measured(self, view: RequestView) -> None:
        """A request done: its step rate joins its shape's. Its own steps' where it spanned a few; else its time
        at the server over its steps (a server that tells no progress)."""
        rate = view.clock.rate_s()
        if rate is None and _server_s(view):
            rate = _server_s(view) / view.planned_steps
        if rate is not None:
            self.step_rates.add(view.shape, rate)

    def _forget_oldest_finished(self) -> None:
        """Past max_finished_runs finished runs, the oldest go from memory (History keeps them)."""
        finished = [run for run in self.runs if self._unfinished.get(run.id) == 0]
        extra = len(finished) - self.max_finished_runs
        if extra <= 0:
            return
        gone = {run.id for run in finished[:extra]}
        self.runs = [run for run in self.runs if run.id not in gone]
        self.finished_order = [view for view in self.finished_order if view.run_id not in gone]
        self._finished_ids = {view.id for view in self.finished_order}
        for run_id in gone:
            del self._unfinished[run_id]

    # ---- reading -----------------------------------------------------------------------------------
    def views(self, visitor: Visitor | None = None) -> list[RequestView]:
        """Newest first."""
        return [view for run in reversed(self.runs) for view in run.views if _theirs(view, visitor)]

    def active(self, visitor: Visitor | None = None) -> list[RequestView]:
        return [view for view in self.views(visitor) if not view.state.finished]

    def done_newest_first(self, visitor: Visitor | None = None) -> list[RequestView]:
        return [
            view for view in reversed(self.finished_order) if view.state is RequestState.DONE and _theirs(view, visitor)
        ]

    def unsent(self, visitor: Visitor | None = None) -> list[RequestView]:
        """Requests waiting in the studio, not yet sent to a server."""
        return [view for view in self.views(visitor) if view.state is RequestState.WAITING]

    def recent_inference_s(self, last: int = 20) -> list[float]:
        """Inference times of the requests done last, all visitors together: what the next ones may take."""
        done = [v for v in reversed(self.finished_order) if v.state is RequestState.DONE and _server_s(v)]
        return [_server_s(view) for view in done[:last]]

    def find(self, request_id: str) -> tuple[Run, RequestView] | None:
        for run in self.runs:
            for view in run.views:
                if view.id == request_id or view.id.endswith(request_id):
                    return run, view
        return None

    def owner_name(self, view: RequestView) -> str:
        """Whose request it is, by the name they go by (never their id: a guest's holds a hash of their cookie)."""
        return self._names.get(view.visitor_id, "unknown")

    def latest_run(self, visitor: Visitor | None = None) -> Run | None:
        """The run made last that `visitor` sees (None: anyone's)."""
        return next((run for run in reversed(self.runs) if visitor is None or run.visitor.id == visitor.id), None)

    def latest_run_views(self, visitor: Visitor | None = None) -> list[RequestView]:
        run = self.latest_run(visitor)
        return [] if run is None else list(run.views)

    def summary(
        self, visitor: Visitor | None = None, slo_s: float | None = None, latest_run: bool = False
    ) -> LatencySummary:
        """The figures of the finished requests `visitor` sees: all this session's, or the latest run's."""
        views = self.latest_run_views(visitor) if latest_run else self.views(visitor)
        return summarize([view.sample() for view in views if view.state.finished], slo_s)

    def progress(self, view: RequestView, now: float | None = None) -> Progress:
        """Real progress where the server reports it; else an estimate from finished requests of the same shape.
        The time to go is reckoned at each call (eta.py): it counts down between progress events."""
        now = now or time.time()
        if view.state.finished:
            return Progress(100.0 if view.state is RequestState.DONE else view.progress, None, False)
        if view.state is not RequestState.RUNNING:
            return Progress(view.progress, None, False)
        if view.server_progress_is_real:
            return Progress(view.progress, self.time_to_go(view, now).remaining_s, False)
        measured = self.step_rates.rate_s(view.shape)
        started = view.timings.first_running
        if measured is None or started is None:
            return Progress(view.progress, None, True)
        percent, left = eta.by_duration(measured[0] * view.planned_steps, now - started)
        return Progress(percent, left, True)

    def time_to_go(self, view: RequestView, now: float | None = None) -> eta.Eta:
        """A running request's time to go, from its own steps and its shape's measured rate."""
        now = now or time.time()
        clock = view.clock
        if clock.first_done is None and view.server_progress_is_real and view.progress > 0:
            # Progress known but not when it was reached (a job followed again): as if seen now.
            clock = eta.StepClock()
            clock.observe(view.steps_done, now)
        return eta.estimate(clock, view.planned_steps, view.started_running, self.step_rates.rate_s(view.shape), now)

    def at_servers_left_s(self, typical_s: float, party: str, theirs: bool = True) -> float:
        """The time still to go of the requests at the servers, of `party` (theirs) or of everyone else: a running
        one's own estimate, counted down as it runs; `typical_s` for one not started or with no estimate yet."""
        now, left = time.time(), 0.0
        for run in list(self.runs):
            if (run.visitor.party == party) != theirs:
                continue
            for view in run.views:
                if view.state is RequestState.QUEUED:
                    left += typical_s
                elif view.state is RequestState.RUNNING:
                    remaining = self.progress(view, now).eta_s
                    left += typical_s if remaining is None else remaining
        return left

    # ---- control -----------------------------------------------------------------------------------
    def cancel(self, request_id: str, by: Visitor = LOCAL_OPERATOR) -> bool:
        """Cancel one request; raises NotYours where it is another visitor's and `by` is no operator."""
        found = self.find(request_id)
        if not found:
            return False
        run, view = found
        if not (by.operator or view.visitor_id == by.id):
            raise NotYours(f"request {request_id!r} is not yours to cancel")
        return run.cancel(view.id)

    def move(self, request_id: str, later: bool, by: Visitor = LOCAL_OPERATOR) -> str | None:
        """Move a request not yet started one place later (or earlier) in its run's order; None where it moved,
        else why not. Raises NotYours where it is another visitor's and `by` is no operator."""
        found = self.find(request_id)
        if not found:
            return "no such request"
        run, view = found
        if not (by.operator or view.visitor_id == by.id):
            raise NotYours(f"request {request_id!r} is not yours to move")
        return run.move_threadsafe(view.id, later)

    def cancel_all(self, by: Visitor = LOCAL_OPERATOR, everyone: bool = False) -> int:
        """Cancel `by`'s unfinished requests; an operator may cancel `everyone`'s."""
        mine_only = not (everyone and by.operator)
        return sum(
            run.cancel_all() for run in self.runs if not run.finished and not (mine_only and run.visitor.id != by.id)
        )

    def cancel_unsent(self, visitor: Visitor) -> int:
        """Cancel the visitor's requests not yet sent to a server; those sent carry on."""
        return sum(run.cancel_unsent() for run in self.runs if not run.finished and run.visitor.id == visitor.id)
