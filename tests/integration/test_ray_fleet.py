"""The fleet on Ray, on this CPU: a local Ray head on loopback (2 CPUs, no dashboard, no usage stats) places two
embedded replicas as actors; the studio's router sends requests straight to their servers. A killed server fails
only what it was running and comes back; shutting down leaves no Ray or server process behind."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import psutil
import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.supervisor import ServerState
from studio.ui.engine_status import engine_summary
from tests.conftest import engine_settings
from tests.waiting import wait_for, wait_for_async

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install .[ray])")

from studio.backend.servers import ray_cluster  # noqa: E402  (after the skip: it needs ray)

pytestmark = pytest.mark.timeout(180)


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _listening(process: psutil.Process) -> list:
    try:
        return [c for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []


@pytest.fixture(scope="module")
def earlier() -> set[int]:
    """Processes this test run had before the fleet (another module's engine, say): not the fleet's to stop."""
    return {process.pid for process in descendants()}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, earlier) -> Iterator[StudioController]:
    connection = ray_cluster.connect(num_cpus=2)
    assert connection.started_here and connection.local
    settings = engine_settings(
        outputs_dir=tmp_path_factory.mktemp("ray") / "outputs", poll_interval_s=0.05, cluster="ray", replicas=2
    )
    controller = StudioController(settings)
    try:
        controller.start()
        yield controller
    finally:
        controller.close()
        ray_cluster.shutdown()


def test_two_ray_replicas_share_a_run(fleet):
    servers = fleet.fleet.servers
    assert len(servers) == 2 and all(server.state is ServerState.READY for server in servers)
    assert all(server.base_url.startswith("http://127.0.0.1:") for server in servers)
    # The servers run under Ray's workers, not under the studio's process.
    studio_children = {process.pid for process in psutil.Process().children()}
    assert all(server.pid not in studio_children for server in servers)
    assert "2 of 2 ready" in engine_summary(fleet) and "Ray (local)" in engine_summary(fleet)
    # Ray's servers (GCS, raylet, workers) and the replicas' listen on loopback only.
    listening = {
        connection.laddr.ip.removeprefix("::ffff:") for process in descendants() for connection in _listening(process)
    }
    assert listening == {"127.0.0.1"}

    async def main():
        run = fleet.new_run(
            RunSpec(prompts=["a red circle"], copies=8, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=8)
        )
        return await run.wait()

    views = asyncio.run(main())
    assert [view.state for view in views] == [RequestState.DONE] * 8
    assert len({view.id for view in views}) == 8
    assert {view.endpoint for view in views} == {server.base_url for server in servers}


def test_a_killed_replica_fails_only_what_it_ran_and_comes_back(fleet):
    victim, other = fleet.fleet.servers
    old_pid, old_url = victim.pid, victim.base_url

    async def main():
        long = fleet.new_run(
            RunSpec(prompts=["a long one"], copies=4, tier="256p", aspect="1:1", frames=9, steps=40, concurrency=4)
        )
        long.start()
        await wait_for_async(
            lambda: any(v.state is RequestState.RUNNING and v.endpoint == old_url for v in long.views),
            "a long request to be running at the first replica",
            120,
        )
        running_there = next(v for v in long.views if v.state is RequestState.RUNNING and v.endpoint == old_url)
        os.kill(old_pid, signal.SIGKILL)
        await long.wait()
        return long.views, running_there

    views, killed = asyncio.run(main())
    assert killed.state is RequestState.FAILED and "crashed" in (killed.error or "")
    assert [view for view in views if view.state is not RequestState.DONE] == [killed]
    assert len({view.id for view in views}) == 4
    # The replica's actor started its server again, on its port: the same URL answers with a new process.
    wait_for(lambda: victim.state is ServerState.READY, "the killed replica's server to be ready again", 60)
    assert victim.state is ServerState.READY and victim.base_url == old_url and victim.pid != old_pid
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE

    asyncio.run(fleet.fleet.pool.check_health())  # what the router's health watch does while runs go on
    assert fleet.fleet.pool.find(old_url).healthy

    async def after():
        run = fleet.new_run(
            RunSpec(prompts=["both again"], copies=4, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=4)
        )
        return await run.wait()

    again = asyncio.run(after())
    assert all(view.state is RequestState.DONE for view in again)
    assert {view.endpoint for view in again} == {victim.base_url, other.base_url}


def test_a_replica_whose_actor_dies_is_restarted_by_ray(fleet):
    victim = fleet.fleet.servers[1]
    old_url, old_pid = victim.base_url, victim.pid
    actor_pid = victim.status_report()["node_pid"]
    os.kill(actor_pid, signal.SIGKILL)  # the actor's worker process: as when its node goes
    wait_for(
        lambda: victim.state is ServerState.READY and victim.pid != old_pid, "a new actor's server to be ready", 90
    )
    assert victim.state is ServerState.READY and victim.pid != old_pid
    assert victim.status_report()["node_pid"] != actor_pid  # a new actor process
    # The server the dead actor left was ended, and the new one took its port: the studio's URL still holds.
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    assert victim.base_url == old_url
    asyncio.run(fleet.fleet.pool.check_health())
    assert fleet.fleet.pool.find(old_url).healthy


def test_with_auto_restart_on_the_studio_restarts_it_through_ray(fleet):
    fleet.set_auto_restart(True)
    try:
        victim = fleet.fleet.servers[0]
        old_url, old_pid = victim.base_url, victim.pid
        os.kill(old_pid, signal.SIGKILL)
        endpoint = fleet.fleet.pool.find(old_url)
        # The controller's restart tells the router when the replica is back: no health probe needed.
        wait_for(lambda: endpoint.healthy and victim.pid != old_pid, "the restarted replica to be healthy", 60)
        assert endpoint.healthy and victim.state is ServerState.READY and victim.base_url == old_url
        assert "restarted automatically" in (fleet.fleet.auto_restart_note or "")
    finally:
        fleet.set_auto_restart(False)


def _named(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def test_shutting_down_leaves_no_ray_or_server_process(fleet, earlier):
    ours = [process for process in descendants() if process.pid not in earlier]
    names = {process.name() for process in ours}
    assert "raylet" in names and "gcs_server" in names
    server_pids = {server.pid for server in fleet.fleet.servers}
    assert server_pids <= {process.pid for process in ours}
    fleet.close()
    ray_cluster.shutdown()
    _gone, alive = psutil.wait_procs(ours, timeout=60)  # a loaded 2-core machine stops them slowly
    assert not alive, [_named(process) for process in alive]
    assert not ray.is_initialized()
