"""A run's size is capped (operators' runs too), and cancelling a large run leaves the studio answering: a run of
10,000 lines used to be accepted, and its cancel froze the studio for everyone (5,000 lines: 15 s without an
answer to a GET), the cost growing faster than the run. The same for the last page of a visitor closing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import time

import httpx
from gradio_client import Client

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import Visitor
from studio.config import StudioSettings
from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import LoopLag, wait_for

LARGE = 5000
# What a GET to the studio may take while the run is cancelled; the freeze it replaces lasted 15 s.
ANSWER_WITHIN_S = 3.0
# A request at the engine for a while (the first of the run), the rest of the run waiting in the studio behind it.
SLOW = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 200, "seed": "1", "seed_policy": "fixed"}


def states(database, run_id: str) -> dict[str, int]:
    with sqlite3.connect(database) as db:
        return dict(db.execute("SELECT state, COUNT(*) FROM requests WHERE run_id = ? GROUP BY state", (run_id,)))


def only_run(database) -> str:
    with sqlite3.connect(database) as db:
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
    return run_id


def at_the_engine(database) -> bool:
    if not database.exists():
        return False
    with sqlite3.connect(database) as db:
        return bool(db.execute("SELECT COUNT(*) FROM requests WHERE job_id IS NOT NULL").fetchone()[0])


def test_a_run_past_the_cap_is_refused_naming_the_setting(tmp_path):
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        operator = Client(studio.url, verbose=False)  # on loopback without accounts: an operator
        lines = "\n".join(f"a red circle moving left, take {i}" for i in range(1001))
        status = operator.predict(prompts=lines, copies=1, concurrency=1, **SLOW, api_name="/generate")
        assert status.startswith("**cannot generate**") and "at most 1000 requests" in status, status
        assert "max_run_requests" in status and "--max-run-requests" in status
        with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
            assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    finally:
        stop_studio(studio)


def test_the_studio_answers_while_a_large_run_is_cancelled(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_STUDIO_MAX_RUN_REQUESTS", str(LARGE))
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    database = studio.outputs / "history.sqlite3"
    try:
        operator = Client(studio.url, verbose=False)
        # A prompts field holds at most 64 KB: the run's size comes from its copies.
        lines = "\n".join(f"a red circle moving left, take {i}" for i in range(LARGE // 50))
        status = operator.predict(prompts=lines, copies=50, concurrency=1, **SLOW, api_name="/generate")
        assert status.startswith(f"queued {LARGE} requests"), status
        wait_for(lambda: at_the_engine(database), "the run's first request to reach the engine", 120)

        answered: list[float] = []
        began = time.monotonic()
        cancel = operator.submit(api_name="/cancel_all")
        while not cancel.done() or not answered:
            asked = time.monotonic()
            assert httpx.get(studio.url, timeout=60).status_code == 200
            answered.append(time.monotonic() - asked)
        outcome = cancel.result(timeout=60)
        took = time.monotonic() - began
        assert max(answered) < ANSWER_WITHIN_S, f"a GET took {max(answered):.1f} s during the cancel"
        assert outcome.startswith("cancelled"), outcome  # all of them, or all but one that finished first
        run_id = only_run(database)
        settled = wait_for(
            lambda: (found := states(database, run_id)) and set(found) <= {"cancelled", "done"} and found,
            "every request of the run settled in history",
            60,
            detail=lambda: str(states(database, run_id)),
        )
        assert settled.get("cancelled", 0) >= LARGE - 1 and sum(settled.values()) == LARGE
        assert took < 30.0, f"the cancel took {took:.1f} s"
    finally:
        stop_studio(studio)


def test_closing_the_last_page_cancels_a_large_run_without_holding_the_studio(tmp_path):
    alice = Visitor("user:alice", "alice")
    settings = StudioSettings(
        _env_file=None,
        outputs_dir=tmp_path / "outputs",
        engine_threads=1,
        visitor_max_queued=LARGE,
        max_run_requests=LARGE,
    )

    async def scenario() -> tuple[float, float, int, list[RequestState], StudioController]:
        controller = StudioController(settings)
        await asyncio.to_thread(controller.start)
        spec = RunSpec(prompts=[f"a blue square moving up, take {i}" for i in range(LARGE)], frames=5, steps=200)
        controller.page_opened(alice, "alice's only page")
        run = controller.new_run(spec, alice)
        run.start()
        async for view in run.updates():
            if view.job_id is not None:  # the first is at the engine; the rest wait in the studio
                break
        async with LoopLag(0.01) as lag:
            began = time.monotonic()
            # As the page's unload handler calls it: from a worker thread, not the event loop.
            with concurrent.futures.ThreadPoolExecutor(1) as worker:
                cancelled = await asyncio.get_running_loop().run_in_executor(
                    worker, controller.page_closed, alice, "alice's only page"
                )
            finished = until(run, lambda: all(view.state.finished for view in run.views[1:]))
            await asyncio.wait_for(finished, timeout=30)
            took = time.monotonic() - began
        held = lag.held_s
        run.cancel_all()  # the one at the engine too, to end the run
        await asyncio.wait_for(run.wait(), timeout=60)
        await controller.fleet.pool.close()
        return took, held, cancelled, [view.state for view in run.views], controller

    took, held, cancelled, states_now, controller = asyncio.run(scenario())
    try:
        assert cancelled == LARGE - 1
        assert states_now[1:] == [RequestState.CANCELLED] * (LARGE - 1)
        rows = controller.store.run_requests(controller.board.runs[0].id)
        assert sum(row["state"] == "cancelled" for row in rows) >= LARGE - 1
        assert held < 1.0, f"the event loop was held {held:.2f} s at once"
        assert took < 10.0, f"the page's close took {took:.1f} s to settle"
    finally:
        controller.close()


async def until(run, condition) -> None:
    """Until `condition()` holds, looked at after each change the run tells of; the caller bounds it."""
    if condition():
        return
    async for _ in run.updates():
        if condition():
            return
