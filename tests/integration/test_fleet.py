"""The studio's own fleet on this CPU: two embedded replicas (real engine subprocesses on loopback) behind the
router. Each gets work; one killed fails only what it was running, the other makes the rest."""

from __future__ import annotations

import asyncio
import os
import signal

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.supervisor import ServerState
from studio.ui.engine_status import engine_summary
from tests.conftest import engine_settings
from tests.waiting import wait_for_async


def fleet_controller(tmp_path, **values) -> StudioController:
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05, replicas=2, **values)
    controller = StudioController(settings)
    controller.start()
    return controller


def test_two_replicas_share_a_run_and_one_killed_fails_only_what_it_was_running(tmp_path):
    controller = fleet_controller(tmp_path)
    try:
        assert len(controller.fleet.servers) == 2 and len({server.base_url for server in controller.fleet.servers}) == 2
        assert "2 x embedded on the CPU" in engine_summary(controller) and "2 of 2 ready" in engine_summary(controller)

        async def main():
            quick = controller.new_run(
                RunSpec(prompts=["a red circle"], copies=6, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=6)
            )
            await quick.wait()
            # Four long requests, two at each replica: one running there, one queued behind it.
            long = controller.new_run(
                RunSpec(prompts=["a long one"], copies=4, tier="256p", aspect="1:1", frames=9, steps=60, concurrency=4)
            )
            long.start()
            victim = controller.fleet.servers[0]
            await wait_for_async(
                lambda: any(v.state is RequestState.RUNNING and v.endpoint == victim.base_url for v in long.views),
                "a long request to be running at the first replica",
                120,
            )
            running_there = next(
                v for v in long.views if v.state is RequestState.RUNNING and v.endpoint == victim.base_url
            )
            os.kill(victim.pid, signal.SIGKILL)
            await long.wait()
            return quick.views, long.views, running_there

        quick, long, killed = asyncio.run(main())
        assert all(view.state is RequestState.DONE for view in quick)
        assert {view.endpoint for view in quick} == {server.base_url for server in controller.fleet.servers}
        assert killed.state is RequestState.FAILED and "crashed (exit code -9)" in killed.error
        assert [view for view in long if view.state is not RequestState.DONE] == [killed]
        assert (
            controller.fleet.servers[0].state is ServerState.CRASHED
            and controller.fleet.servers[1].state is ServerState.READY
        )
        assert "1 of 2 ready" in engine_summary(controller)
    finally:
        controller.close()


def test_an_operator_stops_and_restarts_one_replica_while_the_other_serves(tmp_path):
    controller = fleet_controller(tmp_path)
    try:
        first_url = controller.fleet.servers[0].base_url
        controller.fleet.stop_replica(0)
        assert controller.fleet.servers[0].state is ServerState.STOPPED and controller.ready()

        async def served(prompt: str) -> list:
            run = controller.new_run(
                RunSpec(prompts=[prompt], copies=2, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=2)
            )
            return await run.wait()

        while_stopped = asyncio.run(served("while one is stopped"))
        assert all(view.state is RequestState.DONE for view in while_stopped)
        assert {view.endpoint for view in while_stopped} == {controller.fleet.servers[1].base_url}
        controller.fleet.restart_replica(0)
        assert (
            controller.fleet.servers[0].state is ServerState.READY and controller.fleet.servers[0].base_url == first_url
        )
        after = asyncio.run(served("both again"))
        assert {view.endpoint for view in after} == {server.base_url for server in controller.fleet.servers}
    finally:
        controller.close()
