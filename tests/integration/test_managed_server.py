"""ManagedServer with the real embedded engine: ready, fail fast, stop, ports, crash."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time

import httpx
import pytest

from studio.backend.controller import StudioController
from studio.backend.launchers import embedded_launch
from studio.backend.runner import RequestState, RunSpec
from studio.backend.server import ManagedServer, ServerStartError, ServerState, group_members
from tests.conftest import engine_settings

pytestmark = pytest.mark.integration


def test_ready_then_stop_leaves_no_process(tmp_path):
    settings = engine_settings()
    server = ManagedServer(lambda port: embedded_launch(settings, port), log_path=tmp_path / "log.txt")
    server.start()
    status = server.status()
    assert status.state is ServerState.READY and status.startup_s > 0
    assert httpx.get(server.base_url + "/health").status_code == 200
    pgid = server.pid
    assert server.stop() is not None
    assert server.state is ServerState.STOPPED
    assert group_members(pgid) == []
    assert "Application startup complete" in (tmp_path / "log.txt").read_text()


def test_bad_model_path_fails_fast_with_log_tail(tmp_path):
    settings = engine_settings(model=str(tmp_path / "no-such-model"))
    server = ManagedServer(lambda port: embedded_launch(settings, port), init_timeout_s=1800)
    started = time.monotonic()
    with pytest.raises(ServerStartError) as failure:
        server.start()
    assert time.monotonic() - started < 60  # not the 1800 s init timeout
    message = str(failure.value)
    assert "exited with code 2 before it was ready" in message
    assert "no-such-model" in message and "not found" in message
    assert server.state is ServerState.FAILED


def test_taken_port_is_reported(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = ManagedServer(lambda p: embedded_launch(engine_settings(), p), port=port)
        with pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()


def test_crash_is_noticed_and_fails_in_flight_requests(tmp_path):
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05)
    controller = StudioController(settings)
    controller.start()
    exited = threading.Event()
    controller.server.on_exit(lambda server: exited.set())

    async def main():
        finished = controller.new_run(RunSpec(prompts=["finished first"], tier="256p", aspect="1:1", frames=5, steps=2))
        await finished.wait()
        run = controller.new_run(RunSpec(prompts=["a long one"], tier="256p", frames=33, steps=200))
        run.start()
        view = run.views[0]
        while view.state is not RequestState.RUNNING:
            await asyncio.sleep(0.05)
        os.kill(controller.server.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await run.wait()
        return finished.views[0], view, time.monotonic() - killed_at

    try:
        done, crashed, fail_s = asyncio.run(main())
        assert exited.is_set() and controller.server.state is ServerState.CRASHED
        assert controller.server.status().exit_code == -9
        assert crashed.state is RequestState.FAILED and "crashed (exit code -9)" in crashed.error
        assert fail_s < 5
        assert controller.store.request_row(crashed.id)["state"] == "failed"
        assert done.state is RequestState.DONE and done.video_path.is_file() and done.sidecar_path.is_file()
    finally:
        controller.close()
