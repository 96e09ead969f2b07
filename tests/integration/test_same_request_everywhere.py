"""The page, `omni-studio generate`, `omni-studio bench` and a program through the studio's own /v1/videos send one
engine the same request for the same inputs: one real embedded engine, behind a proxy that keeps the form of every
POST /v1/videos it passes on, and the four pointed at it as `--engine remote --url`. What they leave empty takes the remote kind's defaults (RunSpec.resolved:
Cosmos 3's 189 frames, 35 steps, guidance 6.0, 24 fps), sent as such rather than left to the server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from studio import tiers
from studio.backend.controller import StudioController
from studio.backend.engine_kinds import REMOTE
from studio.backend.runs.request_state import RequestState
from studio.backend.servers.supervisor import free_port
from studio.protocol import RANDOM_SEED_BOUND
from studio.ui import handlers
from tests.conftest import engine_settings, start_engine
from tests.studio_process import start_studio, stop_studio
from tests.waiting import wait_for, wait_for_async

PROMPT = "a red circle moving left on a white background"
# Hop-by-hop headers, and those httpx has already acted on (the body comes decoded, whole).
NOT_PASSED_ON = {"host", "content-length", "transfer-encoding", "content-encoding", "connection"}
# The fields the three must agree on (every field but the prompt and the seed's value).
SHAPE_FIELDS = ("size", "num_frames", "fps", "num_inference_steps", "guidance_scale")


@dataclass
class RecordingProxy:
    """Passes every call on to `upstream`; keeps the text fields of each POST /v1/videos form, as received."""

    upstream: str
    forms: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def app(self) -> Starlette:
        async def forward(request: Request) -> Response:
            body = await request.body()
            if request.method == "POST" and request.url.path == "/v1/videos":
                form = await request.form()
                self.forms.append({name: value for name, value in form.items() if isinstance(value, str)})
            headers = {name: value for name, value in request.headers.items() if name.lower() not in NOT_PASSED_ON}
            async with httpx.AsyncClient(base_url=self.upstream, timeout=120) as client:
                answer = await client.request(
                    request.method, request.url.path, params=request.query_params, content=body, headers=headers
                )
            kept = {name: value for name, value in answer.headers.items() if name.lower() not in NOT_PASSED_ON}
            return Response(answer.content, status_code=answer.status_code, headers=kept)

        methods = ["GET", "POST", "DELETE"]
        return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


@pytest.fixture(scope="module")
def proxy(tmp_path_factory) -> Iterator[RecordingProxy]:
    engine = start_engine(tmp_path_factory.mktemp("same-request-engine"))
    recording = RecordingProxy(engine.base_url)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(recording.app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="recording-proxy", daemon=True)
    thread.start()
    recording.url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.started, "the recording proxy to listen", 30)
        yield recording
    finally:
        server.should_exit = True
        thread.join(30)
        engine.stop()


def studio(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "studio", *args], capture_output=True, text=True, timeout=timeout)


def sent_by(proxy: RecordingProxy, action) -> list[dict[str, str]]:
    """The forms the engine received while `action` ran."""
    before = len(proxy.forms)
    action()
    return proxy.forms[before:]


def test_the_page_generate_and_bench_send_the_same_request(proxy, tmp_path):
    def page() -> None:
        controller = StudioController(
            engine_settings(
                engine="remote", remote_urls=[proxy.url], outputs_dir=tmp_path / "page", poll_interval_s=0.05
            )
        )
        try:
            controller.start()

            async def submit() -> None:
                form = {"prompts": PROMPT, "tier": "256p", "aspect": "16:9"}
                status = await handlers.submit(controller, form)
                assert status.startswith("queued 1 request"), status
                await wait_for_async(lambda: not controller.board.active(), "the page's request to finish", 240)

            asyncio.run(submit())
            assert [view.state for view in controller.board.runs[-1].views] == [RequestState.DONE]
        finally:
            controller.close()

    def generate() -> None:
        remote = ("--engine", "remote", "--url", proxy.url)
        result = studio(
            "generate", PROMPT, *remote, "--tier", "256p", "--aspect", "16:9", "--out", str(tmp_path / "cli")
        )
        assert result.returncode == 0, result.stderr[-3000:]

    def bench() -> None:
        remote = ("--engine", "remote", "--url", proxy.url)
        cells = ("--concurrency", "1", "--requests", "1", "--tier", "256p")
        result = studio("bench", *remote, *cells, "--out", str(tmp_path / "bench"))
        assert result.returncode == 0, result.stderr[-3000:]

    def gateway() -> None:
        # A program's request to the studio's own port: the prompt and the size of 256p 16:9, the rest its defaults
        # (a studio on loopback without sign-in: its caller is the person at the keyboard, no key needed).
        running = start_studio(tmp_path / "gateway", tmp_path / "gateway.log", "--engine", "remote", "--url", proxy.url)
        try:
            width, height = tiers.size_for("256p", "16:9")
            with httpx.Client(base_url=running.url, timeout=60) as http:
                made = http.post("/v1/videos", files={"prompt": (None, PROMPT), "size": (None, f"{width}x{height}")})
                assert made.status_code == 200, made.text
                video = made.json()["id"]
                done = wait_for(
                    lambda: http.get(f"/v1/videos/{video}").json()["status"] in ("completed", "failed"),
                    "the program's video to finish",
                    240,
                )
                assert done and http.get(f"/v1/videos/{video}").json()["status"] == "completed"
        finally:
            stop_studio(running)

    sent = {
        "page": sent_by(proxy, page),
        "generate": sent_by(proxy, generate),
        "bench": sent_by(proxy, bench),
        "gateway": sent_by(proxy, gateway),
    }
    assert [len(forms) for forms in sent.values()] == [1, 1, 2, 1]  # the bench: its warm-up request, then the cell's
    forms = [form for each in sent.values() for form in each]

    # One request: the same fields, every one but the prompt and the seed's value the same.
    def without_prompt_and_seed(form: dict[str, str]) -> dict[str, str]:
        return {name: value for name, value in form.items() if name not in ("prompt", "seed")}

    assert all(without_prompt_and_seed(form) == without_prompt_and_seed(forms[0]) for form in forms), sent
    # The remote kind's defaults, sent: none of them left to the server.
    defaults = REMOTE.defaults_for("256p")
    width, height = tiers.size_for("256p", "16:9")
    assert {name: forms[0].get(name) for name in SHAPE_FIELDS} == {
        "size": f"{width}x{height}",
        "num_frames": str(defaults.frames),
        "fps": str(defaults.fps),
        "num_inference_steps": str(defaults.steps),
        "guidance_scale": str(defaults.guidance),
    }
    assert (defaults.frames, defaults.steps, defaults.guidance, defaults.fps) == (189, 35, 6.0, 24)
    # The same seed handling: each request carries a seed the studio chose, below the bound of its random draws.
    assert all(0 <= int(form["seed"]) < RANDOM_SEED_BOUND for form in forms), sent
    # What the engine made is what was asked.
    jobs = httpx.get(f"{proxy.url}/v1/videos", params={"limit": 100}).json()["data"]
    assert len(jobs) == 5 and all(job["status"] == "completed" and job["num_frames"] == 189 for job in jobs)
