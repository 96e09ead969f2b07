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


def _first_seen_running(base_url: str, job_ids: list[str], timeout_s: float = 60.0) -> list[str]:
    """The jobs in the order they were first seen started (running or finished), polled every 10 ms."""
    import httpx

    from tests.waiting import wait_for

    seen: list[str] = []
    with httpx.Client(base_url=base_url, timeout=5.0) as http:

        def all_started() -> bool:
            seen.extend(
                job_id
                for job_id in job_ids
                if job_id not in seen and http.get(f"/v1/videos/{job_id}").json()["status"] != "queued"
            )
            return len(seen) == len(job_ids)

        wait_for(all_started, "the three jobs started", timeout_s, poll_s=0.01, detail=lambda: f"seen {seen}")
    return seen


def test_posts_that_arrive_out_of_order_start_in_the_order_sent(engine):
    """Three POSTs of one stream arrive last first while the engine is idle: it waits for the first one sent (up
    to a second) and starts them in the order their client sent them; a POST without the header is not held."""
    import secrets

    import httpx

    from studio.protocol import ORDER_HEADER

    stream = secrets.token_hex(6)
    form = {"prompt": "a red circle moving left on a white background", "size": "64x64", "num_frames": "9"}
    with httpx.Client(base_url=engine.base_url, timeout=30.0) as http:
        ids = {
            seq: http.post(
                "/v1/videos", data={**form, "num_inference_steps": "12"}, headers={ORDER_HEADER: f"{stream}.{seq}"}
            ).json()["id"]
            for seq in (2, 1, 0)
        }
    assert _first_seen_running(engine.base_url, [ids[0], ids[1], ids[2]]) == [ids[0], ids[1], ids[2]]


def test_a_visitors_batch_starts_in_the_order_of_its_prompts(engine, tmp_path):
    """Six prompts sent side by side to one engine that runs one at a time: they finish in the order given."""
    controller = StudioController(
        engine_settings(
            engine="remote", remote_urls=[engine.base_url], outputs_dir=tmp_path / "outputs", poll_interval_s=0.05
        )
    )
    controller.start()
    try:
        spec = RunSpec(prompts=PROMPTS[:6], tier="256p", aspect="1:1", frames=5, steps=2, concurrency=6)

        async def run_it() -> list:
            run = controller.new_run(spec, VISITOR)
            run.start()
            return await run.wait()

        views = asyncio.run(run_it())
        assert [view.state for view in views] == [RequestState.DONE] * 6
        by_completion = sorted(views, key=lambda view: view.timings.completed)
        assert [view.position for view in by_completion] == list(range(6))
    finally:
        controller.close()
