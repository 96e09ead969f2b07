"""What one run may ask for, and what it costs to cancel one: a cap on a run's requests (operators too), whole
numbers where a field counts something, upper bounds on the sharing settings (also when an operator changes them
live), and a cancel of a large run that takes time in proportion to it without holding the event loop."""

from __future__ import annotations

import argparse
import asyncio
import time

import pytest
from pydantic import ValidationError

from studio.backend.clients.router import EndpointPool
from studio.backend.controller import RunTooLarge, StudioController
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import MAX_CONCURRENCY, RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.cli.studio_flags import add_studio_flags, studio_settings
from studio.config import StudioSettings
from tests.waiting import LoopLag

ALICE = Visitor("alice", "Alice", operator=False)
# A port nothing listens on: attaching to it sends nothing.
NOWHERE = "http://127.0.0.1:9"


def spec(prompts: int, **values: object) -> RunSpec:
    return RunSpec(prompts=[f"p{i}" for i in range(prompts)], tier="256p", aspect="1:1", frames=5, steps=2, **values)


@pytest.fixture
def controller(tmp_path):
    settings = StudioSettings(
        _env_file=None, engine="remote", remote_urls=[NOWHERE], outputs_dir=tmp_path / "outputs", max_run_requests=6
    )
    controller = StudioController(settings)
    controller.start()
    yield controller
    controller.close()


# ---- a cap on a run's requests --------------------------------------------------------------------------
def test_a_run_over_the_cap_is_refused_naming_the_setting_for_operators_too(controller):
    for visitor in (LOCAL_OPERATOR, ALICE):
        with pytest.raises(RunTooLarge) as refused:
            controller.new_run(spec(4, copies=2), visitor)
        message = str(refused.value)
        assert "at most 6 requests" in message and "this one has 8 (4 prompts x 2 copies)" in message
        assert "max_run_requests" in message and "--max-run-requests" in message
        assert "OMNI_STUDIO_MAX_RUN_REQUESTS" in message
    assert controller.board.runs == [] and controller.store.recent_runs() == []
    assert len(controller.new_run(spec(3, copies=2)).views) == 6  # at the cap: made


def test_the_cap_is_a_setting_like_the_others(monkeypatch):
    assert StudioSettings(_env_file=None).max_run_requests == 1000
    monkeypatch.setenv("OMNI_STUDIO_MAX_RUN_REQUESTS", "50")
    assert StudioSettings(_env_file=None).max_run_requests == 50
    parser = argparse.ArgumentParser()
    add_studio_flags(parser, ("max_run_requests",))
    assert studio_settings(parser.parse_args(["--max-run-requests", "7"])).max_run_requests == 7
    for bad in (0, 100_001, 1.5):
        with pytest.raises(ValidationError, match="max_run_requests"):
            StudioSettings(_env_file=None, max_run_requests=bad)


# ---- whole numbers --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"copies": 1.5}, "copies per prompt must be a whole number from 1 to 64, got 1.5"),
        ({"frames": 9.5}, "frames must be a whole number from 5 to 400, got 9.5"),
        ({"frames": 9.5, "tier": "720p"}, "frames must be a whole number from 5 to 200, got 9.5"),
        ({"steps": 2.5}, "steps must be a whole number from 1 to 200, got 2.5"),
        ({"concurrency": 1.5}, f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, got 1.5"),
        ({"copies": "1.5"}, "copies per prompt must be a whole number from 1 to 64, got 1.5"),
        ({"copies": "two"}, "copies per prompt must be a whole number from 1 to 64, got 'two'"),
    ],
)
def test_a_count_that_is_not_a_whole_number_is_refused_in_plain_words(values, message):
    with pytest.raises(ValidationError) as refused:
        RunSpec(prompts=["a red circle"], **values)
    assert [error["msg"] for error in refused.value.errors()] == [message]


def test_whole_numbers_given_as_floats_are_taken_as_they_are():
    made = RunSpec(prompts=["a", "b"], copies=2.0, frames=9.0, steps=4.0, concurrency=3.0)
    assert (made.copies, made.frames, made.steps, made.concurrency) == (2, 9, 4, 3)
    assert len(made.build_requests()) == 4


# ---- upper bounds of the sharing settings ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "most"),
    [
        ("in_flight_slots", 1024),
        ("visitor_max_in_flight", 1024),
        ("visitor_max_queued", 100_000),
        ("visitor_max_videos_per_hour", 100_000),
    ],
)
def test_the_sharing_settings_have_upper_bounds(name, most):
    assert getattr(StudioSettings(_env_file=None, **{name: most}), name) == most
    for bad in (most + 1, 1e12):
        with pytest.raises(ValidationError, match=name):
            StudioSettings(_env_file=None, **{name: bad})


def test_applying_sharing_live_checks_the_bounds_and_changes_nothing_when_refused(controller):
    slots = controller.dispatcher.slots
    for values in ({"in_flight_slots": 1e12}, {"visitor_max_in_flight": 10**9}, {"visitor_max_queued": 10**9}):
        with pytest.raises(ValidationError):
            controller.apply_sharing(**values)
    assert controller.dispatcher.slots == slots and controller.settings.in_flight_slots is None
    assert controller.apply_sharing(in_flight_slots=16, max_run_requests=20).max_run_requests == 20
    assert controller.dispatcher.slots == 16


# ---- cancelling a large run -----------------------------------------------------------------------------
async def _cancel_stuck_run(tmp_path, count: int, unsent_only: bool) -> tuple[float, float, Run, OutputStore]:
    """A run of `count` requests whose first waits for a server that never comes (nothing listens), the others
    behind it; cancelled with the loop watched. Returns how long until every request was settled, the longest the
    loop was held meanwhile, the run and its store."""
    store = OutputStore(tmp_path / f"outputs-{count}")
    pool = EndpointPool.from_urls([NOWHERE], poll_interval_s=0.05)
    board = RequestBoard()
    run = Run(spec(count), pool, store, server_wait_s=600.0)
    board.add_run(run)
    async for view in run.updates():
        if view.error is not None:  # the first says it waits for a server to come back
            break
    async with LoopLag(0.005) as lag:
        await asyncio.sleep(0.02)  # the ticker's first ticks, before the cancel
        began = time.monotonic()
        cancelled = run.cancel_unsent() if unsent_only else board.cancel_all()
        assert cancelled == count
        await run.wait()
        took = time.monotonic() - began
    held = lag.held_s
    await pool.close()
    assert len(board.finished_order) == count
    return took, held, run, store


@pytest.mark.parametrize("unsent_only", [False, True], ids=["cancel all", "page closed"])
def test_cancelling_a_large_run_takes_time_in_proportion_and_never_holds_the_loop(tmp_path, unsent_only):
    took, held, run, store = asyncio.run(_cancel_stuck_run(tmp_path, 10_000, unsent_only))
    assert all(view.state is RequestState.CANCELLED for view in run.views)
    assert {row["state"] for row in store.run_requests(run.id)} == {"cancelled"}
    # Before: 21 s, the loop held all along (the cost grew with the square of the run).
    assert took < 5.0, f"cancelling 10000 requests took {took:.1f} s"
    assert held < 1.0, f"the event loop was held {held:.2f} s at once"
    store.close()


def test_every_problem_speaks_in_one_voice_naming_the_field_and_its_range():
    from pydantic import ValidationError

    from studio.backend.runs.problems import describe, frames_note
    from studio.backend.runs.spec import count_range
    from studio.ui.handlers import describe_error, field_label

    def message(**values: object) -> str:
        try:
            RunSpec(prompts=["a red circle"], **values)
        except ValidationError as exc:
            return describe_error(exc, "256p")
        raise AssertionError(f"{values} was taken")

    assert message(steps=201) == "steps must be from 1 to 200, got 201"
    assert message(copies=0) == "copies per prompt must be from 1 to 64, got 0"
    assert message(guidance=21.0) == "guidance must be from 0 to 20, got 21.0"
    assert message(frames=2.5) == "frames must be a whole number from 5 to 400, got 2.5"
    assert message(concurrency=1000) == "concurrency must be from 1 to 256, got 1000"
    try:
        RunSpec(prompts=[" "])
    except ValidationError as exc:
        assert describe_error(exc) == "write at least one prompt"  # no "Value error, " of pydantic's
        assert describe(exc, field_label, count_range) == "write at least one prompt"
    assert frames_note(10, "256p") == "frames 10 rounded up to 13: the model makes 4k+1 frames"
    assert frames_note(13, "256p") is None
