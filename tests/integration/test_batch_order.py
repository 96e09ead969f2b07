"""A visitor's requests start in the order of their run, which the visitor may change while they wait: one not yet
started moves up or down (the engine on a CPU runs one at a time, so the videos come in that order)."""

from __future__ import annotations

import asyncio

import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import Visitor
from tests.conftest import engine_settings

pytestmark = pytest.mark.integration

VISITOR = Visitor("user:ann", "ann", operator=False)
PROMPTS = [f"a red circle, take {n}" for n in range(8)]


def test_a_request_not_yet_started_moves_up_and_starts_earlier(engine, tmp_path):
    from studio.backend.runs.board import NotYours

    controller = StudioController(
        engine_settings(
            engine="remote", remote_urls=[engine.base_url], outputs_dir=tmp_path / "outputs", poll_interval_s=0.05
        )
    )
    controller.start()
    try:
        spec = RunSpec(prompts=PROMPTS[:4], tier="256p", aspect="1:1", frames=5, steps=1, concurrency=1)

        async def run_with_the_last_moved_first() -> list:
            run = controller.new_run(spec, VISITOR)
            run.start()
            last = run.views[3]
            # Not yet started (its run's only slot is for the first): it moves, one place at a time.
            assert [controller.board.move(last.id, later=False, by=VISITOR) for _ in range(3)] == [None] * 3
            assert controller.board.move(last.id, later=False, by=VISITOR) == (
                "it is the first of the run's requests waiting to start"
            )
            with pytest.raises(NotYours):
                controller.board.move(last.id, later=True, by=Visitor("user:bob", "bob", operator=False))
            views = await run.wait()
            assert controller.board.move(last.id, later=True, by=VISITOR) == (
                "only a request that has not started yet can be moved"
            )
            return views

        views = asyncio.run(run_with_the_last_moved_first())
        assert [view.state for view in views] == [RequestState.DONE] * 4
        by_completion = sorted(views, key=lambda view: view.timings.completed)
        assert [view.position for view in by_completion] == [3, 0, 1, 2]
    finally:
        controller.close()
