"""A studio restarted while a visitor's request runs at the server follows it up as that visitor's: they see it,
another visitor does not, and their own "Cancel all" reaches it (it used to belong to the follow-up run of the
person at the keyboard, out of the visitor's reach)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3

from gradio_client import Client

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.visitors import Visitor
from studio.config import StudioSettings
from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import wait_for

ALICE, BOB = Visitor("user:alice", "alice"), Visitor("user:bob", "bob")  # as the page names them


def history(database) -> list[tuple]:
    with sqlite3.connect(database) as db:
        return db.execute(
            "SELECT q.state, q.job_id, r.visitor FROM requests q JOIN runs r ON r.id = q.run_id"
        ).fetchall()


def test_a_followed_up_request_stays_its_visitors(engine, tmp_path):
    outputs = tmp_path / "outputs"
    database = outputs / "history.sqlite3"
    remote = ["--engine", "remote", "--url", engine.base_url]
    studio = start_studio(
        outputs, tmp_path / "studio.log", "--auth", "alice:alice-pass", "--auth", "bob:bob-pass", *remote
    )
    try:
        status = Client(studio.url, auth=("alice", "alice-pass"), verbose=False).predict(
            prompts="a red circle, alice's long one",
            tier="256p",
            aspect="1:1",
            frames=5,
            steps=200,
            seed="1",
            seed_policy="fixed",
            copies=1,
            concurrency=1,
            api_name="/generate",
        )
        assert status.startswith("queued 1 request")
        wait_for(
            lambda: database.exists() and history(database) and history(database)[0][1],
            "alice's request to reach the engine",
            120,
        )
        studio.process.send_signal(signal.SIGTERM)  # the studio goes; the job stays at the engine
        studio.process.wait(60)
    finally:
        stop_studio(studio)
    assert history(database)[0][0] in ("queued", "running") and history(database)[0][2] == ALICE.id

    async def follow_up_and_cancel() -> tuple[int, int, int, int, RequestState]:
        settings = StudioSettings(_env_file=None, outputs_dir=outputs, engine="remote", remote_urls=[engine.base_url])
        controller = StudioController(settings)
        try:
            await asyncio.to_thread(controller.start)
            followed = await controller.resume_unfinished()
            seen = len(controller.board.views(ALICE)), len(controller.board.views(BOB))
            bobs = controller.board.cancel_all(by=BOB)
            alices = controller.board.cancel_all(by=ALICE)
            (run,) = controller.board.runs
            await run.wait()
            return followed, *seen, bobs + 10 * alices, run.views[0].state
        finally:
            if controller.fleet.pool is not None:
                await controller.fleet.pool.close()
            controller.close()

    followed, alice_sees, bob_sees, cancelled, state = asyncio.run(follow_up_and_cancel())
    assert (followed, alice_sees, bob_sees) == (1, 1, 0)
    assert cancelled == 10  # bob's cancel-all reached nothing; alice's reached her request
    assert state is RequestState.CANCELLED
    assert history(database)[0][0] == "cancelled"
