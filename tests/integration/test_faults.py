"""Faults of a real engine process: hung (SIGSTOP), too slow to start."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from itertools import pairwise

import pytest

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer, ServerStartError, ServerState
from tests.conftest import engine_settings, start_engine
from tests.waiting import wait_for_async


def test_a_hung_server_times_out_clearly_and_the_studio_stays_responsive(tmp_path):
    server = start_engine(tmp_path)
    try:
        pool = EndpointPool.from_urls([server.base_url], http_timeout_s=2.0, poll_interval_s=0.05)
        store = OutputStore(tmp_path / "outputs")
        os.killpg(server.pid, signal.SIGSTOP)

        async def main():
            run = Run(RunSpec(prompts=["hung"], tier="256p", aspect="1:1", frames=5, steps=2), pool, store)
            run.start()
            asked: list[float] = []

            def finished() -> bool:  # asked every 0.05 s: how late each ask comes is the loop's lag
                asked.append(time.perf_counter())
                return run.finished

            # The loop keeps turning while the request waits on a dead socket.
            await wait_for_async(finished, "the hung request to fail", 30, poll_s=0.05)
            await pool.close()
            return run.views[0], max(later - earlier - 0.05 for earlier, later in pairwise(asked))

        started = time.monotonic()
        view, worst_lag = asyncio.run(main())
        assert view.state is RequestState.FAILED and "did not answer" in view.error
        assert time.monotonic() - started < 30
        assert worst_lag < 0.5
    finally:
        os.killpg(server.pid, signal.SIGCONT)
        server.stop()


def test_init_timeout_is_reported_with_the_log(tmp_path):
    settings = engine_settings()
    server = ManagedServer(lambda port: embedded_launch(settings, port), init_timeout_s=0.5)
    with pytest.raises(ServerStartError, match="not ready within the init timeout"):
        server.start()
    assert server.state is ServerState.FAILED and server.pid is None
