"""Two real engines behind the router: one goes down, its requests go to the other, it comes back."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from studio.backend.request_state import RequestState
from studio.backend.router import EndpointPool
from studio.backend.runs import Run
from studio.backend.spec import RunSpec
from studio.backend.store import OutputStore
from tests.conftest import start_engine

pytestmark = pytest.mark.integration


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
