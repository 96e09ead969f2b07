"""The fleet on Ray with real `vllm serve --omni` replicas (through the CPU platform plugin): each replica is a Ray
actor that asks for its width in GPUs, starts the server on the node Ray placed it on, and reports its URL; the
studio's router sends a run straight to the servers. The local Ray here declares two GPUs that this CPU machine
does not have: Ray only counts them, and the plugin runs the servers on the CPU."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers import ray_cluster
from studio.backend.servers.supervisor import ServerState
from studio.ui.engine_status import engine_summary
from tests.ray_checks import left_running
from tests.vllm_omni.conftest import vllm_settings

pytest.importorskip("ray", reason="the ray extra is not installed (pip install .[ray])")


def test_two_vllm_omni_replicas_as_ray_actors_share_a_run(tmp_path):
    before = {process.pid for process in psutil.Process().children(recursive=True)}
    connection = ray_cluster.connect(num_cpus=4, num_gpus=2)
    assert connection.started_here
    controller = StudioController(
        vllm_settings(cluster="ray", replicas=2, outputs_dir=tmp_path / "outputs", engine_threads=1)
    )
    try:
        controller.start()
        servers = controller.fleet.servers
        assert len(servers) == 2 and all(server.state is ServerState.READY for server in servers)
        assert sorted(gpu for server in servers for gpu in (server.gpus or [])) == ["0", "1"]  # one each, from Ray
        assert "Ray (local)" in engine_summary(controller)

        async def run() -> list:
            spec = RunSpec(
                prompts=["a red circle"], copies=4, tier="256p", aspect="1:1", frames=5, steps=2, concurrency=4
            )
            return await controller.new_run(spec).wait()

        views = asyncio.run(run())
        assert all(view.state is RequestState.DONE for view in views), [view.error for view in views]
        assert {view.endpoint for view in views} == {server.base_url for server in servers}
    finally:
        controller.close()
        ray_cluster.shutdown()
    fleet = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert left_running(fleet) == []
