"""A server that answers 500, garbage, a truncated or non-mp4 body, or the wrong frame count: the request
fails with the reason, and no broken video is kept or shown as done."""

from __future__ import annotations

import asyncio
import sys

import pytest

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.launchers import LaunchSpec
from studio.backend.servers.supervisor import ManagedServer


def fake_server(mode: str) -> ManagedServer:
    return ManagedServer(
        lambda port: LaunchSpec(
            name=f"faulty-{mode}",
            argv=[sys.executable, "-m", "tests.fakes.faulty_server", "--port", str(port), "--mode", mode],
        ),
        init_timeout_s=60,
    )


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("ok", None),
        ("create-500", "HTTP 500: EngineCore encountered an issue."),
        ("garbage-json", "is not a job record"),
        ("truncated", "does not play"),
        ("not-mp4", "does not play"),
        ("wrong-frames", "3 frames, but 5 were asked"),
    ],
)
def test_bad_answers_fail_with_the_reason(mode, words, tmp_path):
    server = fake_server(mode)
    server.start()
    try:
        pool = EndpointPool.from_urls([server.base_url], poll_interval_s=0.05, max_retries=0)
        store = OutputStore(tmp_path / "outputs")

        async def main():
            run = Run(RunSpec(prompts=["x"], tier="256p", aspect="1:1", frames=5, steps=2), pool, store)
            await run.wait()
            await pool.close()
            return run.views[0]

        view = asyncio.run(main())
    finally:
        server.stop()
    mp4s = list((tmp_path / "outputs" / "videos").glob("*/*.mp4"))
    if words is None:
        assert view.state is RequestState.DONE and len(mp4s) == 1
        return
    assert view.state is RequestState.FAILED and words in view.error, view.error
    assert mp4s == [] and store.request_row(view.id)["state"] == "failed"
