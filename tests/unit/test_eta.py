"""A running request's time to go (studio/backend/runs/eta.py): from its shape's measured step rate, then its own."""

import itertools

import pytest

from studio.backend.clients.base import RequestTimings
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.eta import FEW_STEPS, Shape, StepClock, StepRates, estimate
from studio.backend.runs.request_state import RequestState, RequestView
from studio.protocol import VideoRequest

SHAPE = Shape(320, 192, 33, 35)
T0 = 1000.0  # when the request was first seen running


def stepping(steps: int, step_s: float, first_step_at: float | None = None) -> StepClock:
    """A clock that saw steps 1..`steps` done, `step_s` apart (the first at `first_step_at`)."""
    clock = StepClock()
    first = T0 + step_s if first_step_at is None else first_step_at
    for step in range(1, steps + 1):
        clock.observe(float(step), first + (step - 1) * step_s)
    return clock


def test_step_10_of_35_after_0_6_s_has_about_1_5_s_to_go():
    clock = stepping(10, 0.06)
    eta = estimate(clock, 35, T0, None, now=T0 + 0.6)
    assert eta.remaining_s == pytest.approx(1.5) and eta.source == "own"


def test_before_the_first_step_the_shapes_measured_rate_gives_it():
    rates = StepRates()
    rates.add(SHAPE, 0.5)
    eta = estimate(StepClock(), 35, T0, rates.rate_s(SHAPE), now=T0)
    assert eta.remaining_s == pytest.approx(17.5) and eta.source == "shape"


def test_the_time_to_go_counts_down_with_no_new_event():
    clock = stepping(10, 0.06)
    first = estimate(clock, 35, T0, None, now=T0 + 0.6).remaining_s
    later = estimate(clock, 35, T0, None, now=T0 + 0.63).remaining_s
    assert later == pytest.approx(first - 0.03)
    # A step that takes long: the figure holds at what the steps after it take, never 0 while steps are left.
    stalled = estimate(clock, 35, T0, None, now=T0 + 60).remaining_s
    assert stalled == pytest.approx(24 * 0.06)


def test_a_slow_first_step_does_not_make_the_estimate_absurd():
    # Step 1 after a 1.8 s warm-up, step 2 0.06 s later: its own rate is not yet measured; the shape's holds.
    rates = StepRates()
    rates.add(SHAPE, 0.06)
    clock = stepping(2, 0.06, first_step_at=T0 + 1.8)
    eta = estimate(clock, 35, T0, rates.rate_s(SHAPE), now=T0 + 1.86)
    assert eta.remaining_s == pytest.approx(33 * 0.06)
    # Nothing measured of any shape: no estimate until a few of its own steps, then one without the warm-up.
    assert estimate(clock, 35, T0, None, now=T0 + 1.86).remaining_s is None
    clock = stepping(2 + FEW_STEPS, 0.06, first_step_at=T0 + 1.8)
    assert estimate(clock, 35, T0, None, now=clock.at).remaining_s == pytest.approx(30 * 0.06)


def test_each_step_moves_the_figure_down_smoothly():
    rates = StepRates()
    rates.add(SHAPE, 0.06)
    shown = []
    for steps in range(1, 36):
        clock = stepping(steps, 0.066)  # a little slower than the shape's rate
        shown.append(estimate(clock, 35, T0, rates.rate_s(SHAPE), now=clock.at).remaining_s)
    assert all(later <= earlier + 0.1 for earlier, later in itertools.pairwise(shown))
    assert shown[-1] == 0.0


def test_a_shape_never_seen_takes_the_nearest_measured_one_scaled_by_its_work():
    rates = StepRates()
    assert rates.rate_s(SHAPE) is None
    rates.add(SHAPE, 0.06)
    assert rates.rate_s(Shape(320, 192, 33, 50)) == (pytest.approx(0.06), False)  # other steps, same step rate
    assert rates.rate_s(Shape(640, 384, 33, 35)) == (pytest.approx(0.24), False)  # 4x the pixels
    rates.add(Shape(640, 384, 33, 35), 0.3)
    assert rates.rate_s(Shape(640, 384, 65, 35))[0] == pytest.approx(0.3 * 65 / 33)  # the nearer one
    eta = estimate(StepClock(), 50, T0, rates.rate_s(Shape(320, 192, 33, 50)), now=T0)
    assert eta.remaining_s == pytest.approx(3.0) and eta.source == "similar"


def _view(steps: int = 35) -> RequestView:
    request = VideoRequest(prompt="p", width=320, height=192, num_frames=33, num_inference_steps=steps)
    timings = RequestTimings(created=0.0, sent=0.0, accepted=0.0, first_running=T0)
    return RequestView(id="req_x", run_id="run", position=0, request=request, timings=timings)


def test_the_board_measures_a_shape_from_the_steps_of_requests_done():
    board = RequestBoard()
    done = _view()
    done.state = RequestState.RUNNING
    for step in range(1, 36):
        done.clock.observe(float(step), T0 + 2.0 + step * 0.5)  # 2 s before its first step: warm-up, not counted
    done.state = RequestState.DONE
    board._on_update(done)
    running = _view()
    running.state, running.server_progress_is_real = RequestState.RUNNING, True
    assert board.progress(running, now=T0).eta_s == pytest.approx(17.5)
    assert board.progress(running, now=T0 + 0.2).eta_s == pytest.approx(17.3)
    running.stepped(1, 35)  # its own steps from here on
    assert 0 < board.progress(running).eta_s <= 17.0
