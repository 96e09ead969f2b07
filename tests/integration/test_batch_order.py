"""A visitor's requests start in the order given: sent at once, they reach the server one after the other, so
that the server queues and runs them in that order (the engine on a CPU runs one at a time)."""

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


def test_a_batch_is_accepted_and_run_in_the_order_of_its_prompts(engine, tmp_path):
    controller = StudioController(
        engine_settings(
            engine="remote", remote_urls=[engine.base_url], outputs_dir=tmp_path / "outputs", poll_interval_s=0.05
        )
    )
    controller.start()
    try:
        spec = RunSpec(prompts=PROMPTS, tier="256p", aspect="1:1", frames=5, steps=1, concurrency=len(PROMPTS))
        views = asyncio.run(controller.new_run(spec, VISITOR).wait())
        assert [view.state for view in views] == [RequestState.DONE] * len(PROMPTS)
        by_acceptance = sorted(views, key=lambda view: view.timings.accepted)
        assert [view.position for view in by_acceptance] == list(range(len(PROMPTS)))
        # The server's own queue: job ids in the order it made them, and the videos in that order too.
        by_completion = sorted(views, key=lambda view: view.timings.completed)
        assert [view.position for view in by_completion] == list(range(len(PROMPTS)))
    finally:
        controller.close()
