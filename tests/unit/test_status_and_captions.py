"""The run's status line leads with how the run stands now, and keeps the submit's line after it however often it is
redrawn; captions and cells cut a long prompt at a word's end, with an ellipsis."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studio.backend.runs.request_state import RequestState
from studio.ui.markdown import clipped
from studio.ui.tables import run_status_line

SUBMITTED = "queued 3 requests (run_20261205_081142_1ab608), 1 at a time"


def board_with(states: list[RequestState], finished: bool) -> SimpleNamespace:
    run = SimpleNamespace(
        id="run_20261205_081142_1ab608",
        visitor=SimpleNamespace(id="alice"),
        views=[SimpleNamespace(state=state) for state in states],
        finished=finished,
    )
    return SimpleNamespace(runs=[run])


def test_the_status_line_leads_with_the_run_now_and_keeps_the_submit_line():
    alice = SimpleNamespace(id="alice", operator=False)
    running = run_status_line(
        board_with([RequestState.DONE, RequestState.RUNNING, RequestState.QUEUED], False), SUBMITTED, alice
    )
    assert running is not None and running.startswith("now: 1 done") and running.endswith(SUBMITTED)
    done = board_with([RequestState.DONE] * 3, True)
    finished = run_status_line(done, running, alice)
    assert finished == f"finished: 3 done · {SUBMITTED}"
    assert run_status_line(done, finished, alice) == finished  # redrawn: unchanged
    assert run_status_line(done, finished, SimpleNamespace(id="bob", operator=False)) is None  # not bob's run


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [
        ("a red circle moving left on a white background", 20, "a red circle …"),
        ("a red circle", 12, "a red circle"),
        ("two\nlines  of   text", 40, "two lines of text"),
        ("x" * 30, 10, "x" * 9 + "…"),
    ],
)
def test_a_long_prompt_is_cut_at_a_word_with_an_ellipsis(text, width, shown):
    assert clipped(text, width) == shown
    assert len(clipped(text, width)) <= width
