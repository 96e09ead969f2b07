"""The studio's fleet of two real `vllm serve --omni` replicas (through the CPU platform plugin), behind its
router: both start side by side, each on its own port and log, and each serves part of a run."""

from __future__ import annotations

import asyncio

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.supervisor import ServerState
from studio.ui.engine_status import engine_summary
from tests.vllm_omni.conftest import vllm_settings


def test_two_vllm_omni_replicas_share_a_run(tmp_path):
    controller = StudioController(vllm_settings(replicas=2, outputs_dir=tmp_path / "outputs"))
    try:
        controller.start()
        servers = controller.fleet.servers
        assert len(servers) == 2 and all(server.state is ServerState.READY for server in servers)
        assert len({server.base_url for server in servers}) == 2
        assert [server.log_path.name for server in servers] == ["vllm-omni-server-0.log", "vllm-omni-server-1.log"]
        assert "2 of 2 ready" in engine_summary(controller)

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
