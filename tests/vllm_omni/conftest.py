"""The real vLLM-Omni server (`vllm serve MODEL --omni`), started by the studio's own ManagedServer.

Runs where OMNI_STUDIO_VLLM names a `vllm` executable with vLLM-Omni (`make test-vllm-omni` builds
.venv-vllm-omni with scripts/setup_vllm_omni_venv.sh and sets it). On this CPU-only machine the server
runs through the CPU platform plugin in tests/vllm_omni_cpu_plugin, test scaffolding that exists because
vLLM-Omni has no CPU platform. Without the variable these tests are skipped, and under CI they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from studio.backend.servers.launchers import vllm_omni_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.config import StudioSettings
from tests.conftest import WAN_DIR

_VLLM = os.environ.get("OMNI_STUDIO_VLLM", "")
VLLM = str(Path(_VLLM).resolve()) if _VLLM else ""
API_KEY = "vllm-test-key-81c2"
START_TIMEOUT_S = 600.0


def pytest_collection_modifyitems(config, items):
    if VLLM and Path(VLLM).is_file():
        return
    reason = "set OMNI_STUDIO_VLLM to a vLLM-Omni `vllm` executable (make test-vllm-omni does)"
    if os.environ.get("OMNI_STUDIO_VLLM_STAGE") == "1":
        raise pytest.UsageError(f"the vLLM-Omni stage found no server to test: {reason}")
    for item in items:
        if "tests/vllm_omni" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))


def vllm_settings(**values) -> StudioSettings:
    base = {
        "engine": "vllm-omni",
        "model": str(WAN_DIR),
        "vllm_executable": VLLM,
        "guardrails": False,
        "log_stats": True,
        "init_timeout_s": START_TIMEOUT_S,
        "poll_interval_s": 0.1,
    }
    return StudioSettings(_env_file=None, **{**base, **values})


def start_vllm(tmp_path: Path, **values) -> ManagedServer:
    settings = vllm_settings(**values)
    server = ManagedServer(
        lambda port: vllm_omni_launch(settings, port),
        log_path=tmp_path / "vllm.log",
        init_timeout_s=settings.init_timeout_s,
    )
    server.start()
    return server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory) -> Iterator[ManagedServer]:
    """One real server for most tests, with an API key (given through VLLM_API_KEY)."""
    server = start_vllm(tmp_path_factory.mktemp("vllm"), api_key=API_KEY)
    yield server
    server.stop()
