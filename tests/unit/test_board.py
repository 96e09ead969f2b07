"""RequestBoard's progress estimate where a server reports none (vLLM-Omni: 0 until 100)."""

import time

from studio.backend.clients.base import RequestTimings
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState, RequestView
from studio.protocol import VideoRequest


def view(state: RequestState, first_running: float | None = None, inference: float | None = None) -> RequestView:
    request = VideoRequest(prompt="p", width=320, height=192, num_frames=33, num_inference_steps=35)
    timings = RequestTimings(created=0.0, sent=0.0, accepted=0.0, first_running=first_running)
    if inference is not None:
        timings.completed, timings.server_inference_s = first_running + inference, inference
    return RequestView(id="req_x", run_id="run", position=0, request=request, state=state, timings=timings)


def test_estimate_from_finished_requests_of_the_same_shape():
    board = RequestBoard()
    now = time.time()
    running = view(RequestState.RUNNING, first_running=now - 5.0)
    unknown = board.progress(running, now)
    assert unknown.estimated and unknown.eta_s is None  # nothing of this shape finished yet
    board._on_update(view(RequestState.DONE, first_running=now - 100, inference=20.0))
    estimate = board.progress(running, now)
    assert estimate.estimated
    assert abs(estimate.percent - 25.0) < 0.5 and abs(estimate.eta_s - 15.0) < 0.5


def test_real_progress_is_used_as_is():
    board = RequestBoard()
    running = view(RequestState.RUNNING, first_running=time.time() - 2.0)
    running.progress, running.server_progress_is_real = 40.0, True
    progress = board.progress(running)
    assert not progress.estimated and progress.percent == 40.0
    assert progress.eta_s is not None and 2.0 < progress.eta_s < 4.0


class _RunStandIn:
    """What the board reads of a run (its id, owner, views, whether it finished, its listeners): the bookkeeping
    under test needs no server."""

    def __init__(self, number: int, state: RequestState) -> None:
        from studio.backend.visitors import LOCAL_OPERATOR

        self.id = f"run_{number}"
        self.visitor = LOCAL_OPERATOR
        one = view(state)
        one.id, one.run_id = f"req_{number}", self.id
        self.views = [one]
        self.listeners = []

    @property
    def finished(self) -> bool:
        return all(v.state.finished for v in self.views)

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)

    def end(self) -> None:
        self.views[0].state = RequestState.DONE
        for listener in self.listeners:
            listener(self.views[0])


def test_a_long_session_keeps_the_newest_finished_runs_and_every_run_under_way():
    board = RequestBoard(max_finished_runs=3)
    under_way = _RunStandIn(0, RequestState.RUNNING)
    board.add_run(under_way)
    for number in range(1, 8):
        run = _RunStandIn(number, RequestState.WAITING)
        board.add_run(run)
        run.end()
    board.add_run(_RunStandIn(8, RequestState.WAITING))  # a new run makes room
    finished = [run.id for run in board.runs if run.finished]
    assert finished == ["run_5", "run_6", "run_7"]
    assert under_way in board.runs and board.runs[-1].id == "run_8"
    assert [v.run_id for v in board.finished_order] == ["run_5", "run_6", "run_7"]
    # What the page compares to know that something ended never goes down.
    assert board.finished_count == 7 and board.finished_runs_count == 7
    assert board.find("req_2") is None and board.find("req_6") is not None
