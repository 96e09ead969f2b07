"""Real engines behind the router: one goes down, its requests go elsewhere or wait for it, it comes back."""

from __future__ import annotations

import asyncio
import os
import signal

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from tests.conftest import MODEL_NAME, start_engine
from tests.waiting import wait_for_async


def test_a_dead_replica_is_skipped_and_comes_back(tmp_path):
    alive = start_engine(tmp_path / "a")
    doomed = start_engine(tmp_path / "b")
    try:
        pool = EndpointPool.from_urls([doomed.base_url, alive.base_url], poll_interval_s=0.05)
        store = OutputStore(tmp_path / "outputs")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.stop()

        async def main():
            run = Run(
                RunSpec(prompts=["a", "b", "c", "d"], tier="256p", aspect="1:1", frames=5, steps=2, concurrency=4),
                pool,
                store,
            )
            await run.wait()
            await pool.close()
            return run

        run = asyncio.run(main())
        assert [v.state for v in run.views] == [RequestState.DONE] * 4
        assert {v.endpoint for v in run.views} == {alive.base_url}
        dead = pool.find(doomed.base_url)
        assert not dead.healthy and dead.failed >= 1

        doomed.start()  # same port: the router brings it back once /health answers
        new_pool = EndpointPool.from_urls([doomed.base_url, alive.base_url])
        new_pool.endpoints[0].healthy = False

        async def probe():
            await new_pool.check_health()
            await new_pool.close()

        asyncio.run(probe())
        assert new_pool.endpoints[0].healthy
    finally:
        alive.stop()
        doomed.stop()


def test_a_single_server_that_went_down_is_waited_for_and_comes_back(tmp_path):
    server = start_engine(tmp_path / "only")
    try:
        pool = EndpointPool.from_urls([server.base_url], poll_interval_s=0.05)
        assert pool.served_models() == [MODEL_NAME]  # as the server names it, not the studio's settings
        store = OutputStore(tmp_path / "outputs")
        server.stop()

        async def main():
            run = Run(
                RunSpec(prompts=["back"], tier="256p", aspect="1:1", frames=5, steps=2),
                pool,
                store,
                server_wait_s=120.0,
            )
            run.start()
            view = run.views[0]

            def says_why_it_waits() -> bool:  # it says why it waits, instead of failing
                if "waiting up to 120 s" in (view.error or ""):
                    return True
                assert not view.state.finished, view.error
                return False

            await wait_for_async(says_why_it_waits, "the request to say it waits for the server", 60)
            await asyncio.to_thread(server.start, same_port=True)
            await run.wait()
            await pool.close()
            return view

        view = asyncio.run(main())
        assert view.state is RequestState.DONE and view.error is None
        assert pool.endpoints[0].healthy
    finally:
        server.stop()
