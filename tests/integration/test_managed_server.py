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
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer, ServerStartError, ServerState, group_members
from tests.conftest import engine_settings
from tests.waiting import wait_for_async


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


def test_a_port_taken_before_the_server_binds_it_is_given_up_for_another(tmp_path):
    """Between the pick of a free port and the server's bind, something else can take the port (another
    replica's vLLM engine sockets did): the server exits with EADDRINUSE, and the studio starts it again on a
    fresh port instead of failing the fleet."""
    settings = engine_settings()
    squatter = socket.socket()
    launched: list[int] = []

    def launch(port: int):
        if not launched:  # the first port is taken the moment after it was picked
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        launched.append(port)
        return embedded_launch(settings, port)

    server = ManagedServer(launch, log_path=tmp_path / "log.txt")
    try:
        server.start()
        assert server.state is ServerState.READY
        assert len(launched) == 2 and server.port == launched[1] != launched[0]
        assert httpx.get(server.base_url + "/health").status_code == 200
        log = (tmp_path / "log.txt").read_text()
        assert "address already in use" in log.lower() and f"port {launched[0]} was taken" in log
    finally:
        server.stop()
        squatter.close()


def test_crash_is_noticed_and_fails_in_flight_requests(tmp_path):
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05)
    controller = StudioController(settings)
    controller.start()
    exited = threading.Event()
    controller.fleet.server.on_exit(lambda server: exited.set())

    async def main():
        finished = controller.new_run(RunSpec(prompts=["finished first"], tier="256p", aspect="1:1", frames=5, steps=2))
        await finished.wait()
        run = controller.new_run(RunSpec(prompts=["a long one"], tier="256p", frames=33, steps=200))
        run.start()
        view = run.views[0]
        await wait_for_async(lambda: view.state is RequestState.RUNNING, "the long request to be running", 120)
        os.kill(controller.fleet.server.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await run.wait()
        return finished.views[0], view, time.monotonic() - killed_at

    try:
        done, crashed, fail_s = asyncio.run(main())
        assert exited.is_set() and controller.fleet.server.state is ServerState.CRASHED
        assert controller.fleet.server.status().exit_code == -9
        assert crashed.state is RequestState.FAILED and "crashed (exit code -9)" in crashed.error
        assert fail_s < 5
        assert controller.store.request_row(crashed.id)["state"] == "failed"
        assert done.state is RequestState.DONE and done.video_path.is_file() and done.sidecar_path.is_file()
    finally:
        controller.close()


def test_auto_restart_resends_what_never_started_and_fails_what_ran(tmp_path):
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05, auto_restart=True)
    controller = StudioController(settings)
    controller.start()
    first_url, first_pid = controller.fleet.server.base_url, controller.fleet.server.pid

    async def main():
        # One long request runs, three short ones wait in the server's queue behind it.
        long_run = controller.new_run(RunSpec(prompts=["a long one"], tier="256p", frames=33, steps=200))
        queued_run = controller.new_run(
            RunSpec(prompts=["queued"], copies=3, concurrency=3, tier="256p", aspect="1:1", frames=5, steps=2)
        )
        long_run.start()
        running = long_run.views[0]
        await wait_for_async(lambda: running.state is RequestState.RUNNING, "the long request to be running", 120)
        queued_run.start()
        await wait_for_async(
            lambda: all(v.state is RequestState.QUEUED and v.job_id for v in queued_run.views),
            "the three short requests to be queued at the server",
            120,
            detail=lambda: f"states {[(v.state.value, v.job_id) for v in queued_run.views]}",
        )
        old_jobs = {v.id: v.job_id for v in queued_run.views}
        os.kill(controller.fleet.server.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await wait_for_async(lambda: running.state.finished, "the running request to finish after the kill", 60)
        fail_s = time.monotonic() - killed_at
        await queued_run.wait()
        return running, fail_s, queued_run.views, old_jobs

    try:
        running, fail_s, resent, old_jobs = asyncio.run(main())
        assert running.state is RequestState.FAILED and "crashed (exit code -9)" in running.error
        assert fail_s < 5
        # The server came back on the same address, as a new process.
        assert controller.fleet.server.state is ServerState.READY
        assert controller.fleet.server.base_url == first_url and controller.fleet.server.pid != first_pid
        assert "restarted automatically" in (controller.fleet.auto_restart_note or "")
        for view in resent:
            assert view.state is RequestState.DONE, view.error
            assert view.resubmissions == 1
            assert view.job_id and view.job_id != old_jobs[view.id]  # a new job at the new server
            assert view.video_path.is_file() and view.sidecar_path.is_file()
            row = controller.store.request_row(view.id)
            assert row["state"] == "done" and row["job_id"] == view.job_id
        # Each request made exactly one video: nothing was run twice.
        videos = sorted(p.name for p in (tmp_path / "outputs" / "videos").rglob("*.mp4"))
        assert len(videos) == 3
    finally:
        controller.close()


def test_without_auto_restart_queued_requests_fail_with_the_reason(tmp_path):
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05)
    controller = StudioController(settings)
    controller.start()

    async def main():
        long_run = controller.new_run(RunSpec(prompts=["a long one"], tier="256p", frames=33, steps=200))
        queued_run = controller.new_run(RunSpec(prompts=["queued"], tier="256p", aspect="1:1", frames=5, steps=2))
        long_run.start()
        await wait_for_async(
            lambda: long_run.views[0].state is RequestState.RUNNING, "the long request to be running", 120
        )
        queued_run.start()
        await wait_for_async(lambda: queued_run.views[0].job_id, "the short request to get a job at the server", 120)
        os.kill(controller.fleet.server.pid, signal.SIGKILL)
        await queued_run.wait()
        await long_run.wait()
        return queued_run.views[0]

    try:
        queued = asyncio.run(main())
        assert queued.state is RequestState.FAILED and "crashed" in queued.error
        assert controller.fleet.server.state is ServerState.CRASHED  # stays down until the user restarts it
    finally:
        controller.close()
