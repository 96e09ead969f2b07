"""Every request of this studio session in one place: the page's table, gallery, figures and cancel.

Fed by the runs' listeners (on the event loop that runs them); read by the page's timer. A version counter
lets readers skip work when nothing changed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from studio.backend.request_state import RequestState, RequestView
from studio.backend.runs import Run
from studio.backend.stats import LatencySummary, summarize


@dataclass(frozen=True)
class Progress:
    percent: float
    eta_s: float | None
    estimated: bool  # True where the server gives no real progress and the studio estimates it


class RequestBoard:
    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.version = 0
        self.finished_order: list[RequestView] = []  # in the order they finished
        self._inference_by_shape: dict[tuple, list[float]] = defaultdict(list)

    def add_run(self, run: Run) -> None:
        run.add_listener(self._on_update)
        self.runs.append(run)
        self.version += 1

    def _on_update(self, view: RequestView) -> None:
        self.version += 1
        if view.state.finished and view not in self.finished_order:
            self.finished_order.append(view)
            if view.state is RequestState.DONE and view.timings.inference_s:
                self._inference_by_shape[view.shape_key].append(view.timings.inference_s)

    # ---- reading -----------------------------------------------------------------------------------
    def views(self) -> list[RequestView]:
        """Newest first."""
        return [view for run in reversed(self.runs) for view in run.views]

    def active(self) -> list[RequestView]:
        return [view for view in self.views() if not view.state.finished]

    def done_newest_first(self) -> list[RequestView]:
        return [view for view in reversed(self.finished_order) if view.state is RequestState.DONE]

    def find(self, request_id: str) -> tuple[Run, RequestView] | None:
        for run in self.runs:
            for view in run.views:
                if view.id == request_id or view.id.endswith(request_id):
                    return run, view
        return None

    def summary(self, slo_s: float | None = None) -> LatencySummary:
        return summarize([view.sample() for view in self.views() if view.state.finished], slo_s)

    def throughput_series(self, bucket_s: float = 10.0) -> list[tuple[float, float]]:
        """(seconds since the first request, videos per minute in that bucket)."""
        done = [v for v in self.finished_order if v.state is RequestState.DONE and v.finished_at]
        if not done:
            return []
        start = min(v.timings.created for v in self.views())
        buckets: dict[int, int] = defaultdict(int)
        for view in done:
            buckets[int((view.finished_at - start) // bucket_s)] += 1
        last = max(buckets)
        return [(i * bucket_s, buckets.get(i, 0) * 60.0 / bucket_s) for i in range(last + 1)]

    def progress(self, view: RequestView, now: float | None = None) -> Progress:
        """Real progress where the server reports it; else an estimate from finished requests of the same shape."""
        now = now or time.time()
        if view.state.finished:
            return Progress(100.0 if view.state is RequestState.DONE else view.progress, None, False)
        if view.server_progress_is_real or view.state is not RequestState.RUNNING:
            return Progress(view.progress, view.eta_s, False)
        history = self._inference_by_shape.get(view.shape_key)
        started = view.timings.first_running
        if not history or started is None:
            return Progress(view.progress, None, True)
        expected = sum(history) / len(history)
        running_for = now - started
        percent = min(99.0, 100.0 * running_for / expected) if expected > 0 else 0.0
        return Progress(percent, max(0.0, expected - running_for), True)

    # ---- control -----------------------------------------------------------------------------------
    def cancel(self, request_id: str) -> bool:
        found = self.find(request_id)
        return bool(found) and found[0].cancel(found[1].id)

    def cancel_all(self) -> int:
        return sum(run.cancel_all() for run in self.runs if not run.finished)
