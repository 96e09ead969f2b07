"""The engine's state as every visitor's page shows it: no server address, port or model path, which only
operators see (the line they get stays as it was)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from studio.backend.clients.router import EndpointPool
from studio.backend.controller import StudioController
from studio.backend.servers.fleet_manager import FleetManager
from studio.backend.servers.supervisor import ServerState, ServerStatus
from studio.config import StudioSettings
from studio.ui.engine_status import engine_summary, public_summary

REMOTE = "http://10.11.12.13:8000/v1"
MODEL_PATH = "/srv/models/secret-project/cosmos3-nano"


@dataclass
class StubServer:
    """What the controller reads of a managed server."""

    state: ServerState
    message: str = ""
    port: int = 43117
    gpus: list[str] | None = None
    name: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def status(self) -> ServerStatus:
        now = time.time()
        return ServerStatus(
            state=self.state,
            name="embedded",
            url=self.base_url,
            pid=4242,
            port=self.port,
            started_at=now - 3,
            ready_at=now if self.state is ServerState.READY else None,
            exit_code=1 if self.state is ServerState.CRASHED else None,
            message=self.message,
            command=f"python -m studio.engine --model {MODEL_PATH} --port {self.port}",
        )

    def on_exit(self, callback) -> None:
        pass

    def stop(self) -> None:
        pass


def hidden(text: str) -> list[str]:
    """What a visitor may not see that `text` shows."""
    return [secret for secret in ("10.11.12.13", "8000", "43117", "127.0.0.1", "/srv/models", "http") if secret in text]


@pytest.fixture
def remote(tmp_path):
    settings = StudioSettings(_env_file=None, engine="remote", remote_urls=[REMOTE], outputs_dir=tmp_path / "out")
    controller = StudioController(settings)
    yield controller
    controller.close()


def test_remote_servers_are_not_named_to_visitors(remote):
    assert public_summary(remote) == "remote servers: not attached"
    remote.fleet.pool = EndpointPool.from_urls([REMOTE])  # attached, without asking the network
    remote.fleet.served_model = MODEL_PATH
    assert REMOTE in engine_summary(remote) and MODEL_PATH in engine_summary(remote, for_operator=True)
    public = public_summary(remote)
    assert public == engine_summary(remote, for_operator=False)
    assert public == "remote servers: 1 attached, serving cosmos3-nano" and not hidden(public)


def test_a_cosmos_framework_server_is_not_named_to_visitors(tmp_path):
    settings = StudioSettings(
        _env_file=None, engine="cosmos-framework", remote_urls=[REMOTE], outputs_dir=tmp_path / "out"
    )
    controller = StudioController(settings)
    try:
        controller.fleet.pool = EndpointPool.from_urls([REMOTE, "http://10.11.12.14:8000"])
        assert "10.11.12.13" in engine_summary(controller)
        assert public_summary(controller) == "Cosmos Framework servers: 2 attached"
    finally:
        controller.close()


@pytest.mark.parametrize(
    ("state", "message", "public"),
    [
        (ServerState.READY, "", "embedded engine: ready, serving cosmos3-nano (started in"),
        (ServerState.STARTING, "loading /srv/models/secret-project", "embedded engine: starting ("),
        (ServerState.CRASHED, "crashed: /srv/models/secret-project/x.bin missing", "embedded engine: crashed"),
    ],
)
def test_the_managed_engine_is_not_located_for_visitors(tmp_path, state, message, public):
    settings = StudioSettings(_env_file=None, outputs_dir=tmp_path / "out", model=MODEL_PATH)
    stub = StubServer(state, message)
    controller = StudioController(settings, fleet=FleetManager(settings, tmp_path, servers=[stub]))
    try:
        controller.fleet.pool = EndpointPool.from_urls(["http://127.0.0.1:43117"])
        controller.fleet.served_model = MODEL_PATH
        if state is ServerState.READY:
            assert "ready at http://127.0.0.1:43117" in engine_summary(controller)  # operators: as before
        line = public_summary(controller)
        assert line.startswith(public) and not hidden(line), line
    finally:
        controller.close()


def test_a_start_error_is_told_to_operators_only(tmp_path):
    settings = StudioSettings(_env_file=None, outputs_dir=tmp_path / "out", model=MODEL_PATH)
    controller = StudioController(settings)
    try:
        controller.fleet.start_error = f"no model at {MODEL_PATH} (port 43117)"
        assert MODEL_PATH in engine_summary(controller)
        assert public_summary(controller) == "embedded engine: failed to start (an operator can see why)"
    finally:
        controller.close()


def test_a_fleet_says_how_many_replicas_serve_and_not_where(tmp_path):
    settings = StudioSettings(_env_file=None, outputs_dir=tmp_path / "out", model=MODEL_PATH)
    controller = StudioController(settings)
    try:
        controller.fleet.servers = [StubServer(ServerState.READY), StubServer(ServerState.STARTING, port=43118)]
        controller.fleet.layout = "2 x embedded on Ray at 10.11.12.13:6379"
        controller.fleet.pool = EndpointPool.from_urls(["http://127.0.0.1:43117"])
        assert "Ray at 10.11.12.13" in engine_summary(controller)
        line = public_summary(controller)
        assert line == "embedded engine: 1 of 2 replicas ready (1 starting)" and not hidden(line)
    finally:
        controller.close()
