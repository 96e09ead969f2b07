"""The outputs disk is full as a run is submitted: the run is refused with "no space left on the outputs folder",
and nothing of it is left behind (it used to answer with Gradio's "upstream app has raised an exception" and keep a
run in History whose first requests stayed 'waiting' for ever)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3

import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.config import StudioSettings
from studio.ui import handlers

LEFT_FREE = 40 * 1024  # as the tester left it: room for a few history rows, not for a run of long prompts


def counts(database) -> tuple[int, int]:
    with sqlite3.connect(database) as db:
        return db.execute("SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM requests)").fetchone()


def test_a_run_submitted_on_a_full_disk_is_refused_and_leaves_nothing_behind(engine, small_disk):
    outputs = small_disk / "outputs"
    settings = StudioSettings(
        _env_file=None, engine="remote", remote_urls=[engine.base_url], outputs_dir=outputs, poll_interval_s=0.05
    )
    controller = StudioController(settings)
    filler = small_disk / "filler"
    try:
        controller.start()
        filler.write_bytes(b"\0" * max(0, shutil.disk_usage(small_disk).free - LEFT_FREE))
        # 16 requests whose history rows do not all fit in what is left: the run's row and its first requests do.
        prompts = ["a red circle moving left " + "on a white background " * 300]
        spec = RunSpec(prompts=prompts, copies=16, tier="256p", aspect="1:1", frames=5, steps=2)
        with pytest.raises(RuntimeError, match=r"no space left on the outputs folder \(.*outputs\)"):
            controller.new_run(spec)
        assert controller.board.runs == []
        assert counts(outputs / "history.sqlite3") == (0, 0)

        # The page says it in its status line, in the same words.
        form = {"prompts": prompts[0], "copies": 16, "tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2}
        status = asyncio.run(handlers.submit(controller, form))
        assert status.startswith("**cannot generate**: no space left on the outputs folder"), status
        assert counts(outputs / "history.sqlite3") == (0, 0) and controller.board.runs == []

        # Once there is room again, the same studio makes the run.
        filler.unlink()

        async def made() -> list[RequestState]:
            run = controller.new_run(RunSpec(prompts=prompts[:1], tier="256p", aspect="1:1", frames=5, steps=2))
            await run.wait()
            await controller.fleet.pool.close()
            return [view.state for view in run.views]

        assert asyncio.run(made()) == [RequestState.DONE]
        assert counts(outputs / "history.sqlite3") == (1, 1)
    finally:
        controller.close()
