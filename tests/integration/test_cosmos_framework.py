"""The studio on the Cosmos Framework's Ray Serve server (`--engine cosmos-framework --url ...`): the CLI, the page's
API, the bench and the run machinery, each against the server's test double (tests/fakes/cosmos_framework_server.py:
the real server needs CUDA GPUs and a Cosmos 3 checkpoint), a real subprocess on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from gradio_client import Client, handle_file
from PIL import Image

from studio.backend.clients.cosmos_framework import (
    GUARDRAILS_AT_START,
    JOB_ID_PREFIX,
    LATENCY_ONLY,
    NO_FOLLOW_UP,
    CosmosFrameworkClient,
)
from studio.backend.clients.router import EndpointPool
from studio.backend.runs.recovery import leftovers_to_follow
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.spec import NO_UPLOAD, RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.supervisor import free_port
from studio.media import probe_mp4
from tests.browser.conftest import start_studio, stop_studio
from tests.shown import as_shown
from tests.waiting import wait_for, wait_for_page

BLOCKED = "a guardrail-unsafe scene"  # the double's guardrails block prompts with these words
# The keys of the server's body (OmniSampleOverrides, docs: cosmos-framework-serve-api); it refuses any other.
OMNI_SAMPLE_KEYS = (
    "name",
    "prompt",
    "negative_prompt",
    "seed",
    "model",
    "model_mode",
    "resolution",
    "aspect_ratio",
    "fps",
    "num_frames",
    "num_steps",
    "guidance",
    "shift",
    "enable_sound",
    "vision_path",
)
SMALL = {"tier": "256p", "aspect": "1:1", "frames": 9, "steps": 2}


@dataclass
class CosmosServer:
    """The double, as its own process group: stopped as a user stops it, or killed outright."""

    url: str
    process: subprocess.Popen
    output_dir: Path
    record: Path  # each POST /generate body it received, one a line

    def videos(self) -> list[Path]:
        """The mp4s the server made, in its own output folder."""
        return sorted(self.output_dir.glob("*/vision.mp4"))

    def bodies(self) -> list[dict]:
        """The bodies of POST /generate it received, as sent, in order."""
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


@contextlib.contextmanager
def cosmos_server(tmp_path: Path, *flags: str, delay_s: float = 0.3) -> Iterator[CosmosServer]:
    port = free_port()
    output_dir = tmp_path / f"serve-{port}"
    log_path = tmp_path / f"serve-{port}.log"
    log = log_path.open("ab")
    argv = [sys.executable, "-m", "tests.fakes.cosmos_framework_server", "--port", str(port)]
    record = tmp_path / f"serve-{port}.bodies"
    argv += ["--delay", str(delay_s), "--output-dir", str(output_dir), "--record", str(record), *flags]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = CosmosServer(f"http://127.0.0.1:{port}", process, output_dir, record)
    try:
        wait_for_page(server.url + "/models", process, log_path, 60)  # no health route: up once /models answers
        yield server
    finally:
        server.kill()
        log.close()


@dataclass
class ImageHost:
    """A web server on loopback with one image: what an image-to-video request names by its URL."""

    url: str
    png: Path  # the same image, as a file to upload
    fetched: list[str] = field(default_factory=list)  # the paths asked for, answered 200


@contextlib.contextmanager
def image_host(tmp_path: Path) -> Iterator[ImageHost]:
    folder = tmp_path / "hosted"
    folder.mkdir(exist_ok=True)
    Image.new("RGB", (64, 64), "red").save(folder / "first-frame.png")
    fetched: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_request(self, code="-", size="-"):
            if str(code) == "200":
                fetched.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="image-host", daemon=True)
    thread.start()
    try:
        yield ImageHost(f"http://127.0.0.1:{server.server_port}/first-frame.png", folder / "first-frame.png", fetched)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def run_requests(urls: list[str], store: OutputStore, timeout_s: float = 60.0, **spec: object) -> list[RequestView]:
    pool = EndpointPool.from_urls(urls, client_class=CosmosFrameworkClient)

    async def main() -> list[RequestView]:
        run = Run(RunSpec(**{"prompts": ["a red circle"], **SMALL, **spec}), pool, store, request_timeout_s=timeout_s)
        views = await run.wait()
        await pool.close()
        return views

    return asyncio.run(main())


# ---- the CLI ---------------------------------------------------------------------------------------
def studio_cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "studio", *args], capture_output=True, text=True, timeout=timeout_s)


def test_generate_makes_a_video_with_its_sidecar(tmp_path):
    with cosmos_server(tmp_path, delay_s=1.0) as server:
        engine = ("--engine", "cosmos-framework", "--url", server.url)
        shape = ("--tier", "256p", "--aspect", "16:9", "--frames", "9", "--fps", "16", "--steps", "2")
        result = studio_cli("generate", "a red circle", *engine, *shape, "--seed", "42", "--out", str(tmp_path / "out"))
        made = server.videos()
    assert result.returncode == 0, result.stderr[-3000:]
    video = Path(result.stdout.strip().splitlines()[-1])
    info = probe_mp4(video)
    assert info.num_frames == 9 and info.fps == 16
    sidecar = json.loads(video.with_suffix(".json").read_text())
    assert sidecar["job_id"].startswith(JOB_ID_PREFIX) and sidecar["seed"] == 42
    # What the server was asked, in its own terms, as it resolved them.
    args = sidecar["job"]["args"]
    assert (args["resolution"], args["aspect_ratio"], args["num_frames"], args["fps"], args["num_steps"]) == (
        "256",
        "16,9",
        9,
        16,
        2,
    )
    assert video.read_bytes() == made[0].read_bytes()  # the mp4 fetched from /outputs, whole
    timings = sidecar["timings"]
    assert timings["latency_s"] >= 1.0  # the call lasts as long as the server takes
    assert timings["queue_wait_s"] is None and timings["inference_s"] is None


def test_generate_reports_a_refused_field_and_an_unknown_model(tmp_path):
    with cosmos_server(tmp_path) as server:
        common = ["--engine", "cosmos-framework", "--url", server.url, "--out", str(tmp_path / "out"), "--quiet"]
        common += ["--tier", "256p", "--frames", "5"]
        guidance = studio_cli("generate", "x", "--guidance", "9", *common)
        model = studio_cli("generate", "x", "--served-model-name", "Cosmos3-Big", *common)
    assert guidance.returncode != 0 and "HTTP 422" in guidance.stderr and "guidance" in guidance.stderr
    assert model.returncode != 0 and "Model 'Cosmos3-Big' not found" in model.stderr


def test_generate_sends_an_image_url_that_the_server_fetches(tmp_path):
    with cosmos_server(tmp_path) as server, image_host(tmp_path) as host:
        engine = ("--engine", "cosmos-framework", "--url", server.url, "--out", str(tmp_path / "out"))
        shape = ("--tier", "256p", "--aspect", "1:1", "--frames", "9", "--steps", "2", "--quiet")
        result = studio_cli("generate", "the red square comes alive", "--image-url", host.url, *engine, *shape)
        (body,) = server.bodies()
    assert result.returncode == 0, result.stderr[-3000:]
    # The contract's body: the image as vision_path, the mode it asks for; nothing the server would refuse.
    assert (body["vision_path"], body["model_mode"]) == (host.url, "image2video")
    assert set(body) <= set(OMNI_SAMPLE_KEYS) and "image_reference" not in body
    assert host.fetched == ["/first-frame.png"]  # the server fetched it
    sidecar = json.loads(Path(result.stdout.strip().splitlines()[-1]).with_suffix(".json").read_text())
    assert json.loads(sidecar["parameters"]["image_reference"]) == {"image_url": host.url}
    assert sidecar["job"]["args"]["vision_path"] == host.url


def test_generate_refuses_an_image_the_server_cannot_take_and_sends_nothing(tmp_path):
    with cosmos_server(tmp_path) as server, image_host(tmp_path) as host:
        common = ("--engine", "cosmos-framework", "--url", server.url, "--out", str(tmp_path / "out"), "--quiet")
        not_http = studio_cli("generate", "x", "--image-url", "ftp://127.0.0.1/first-frame.png", *common)
        no_scheme = studio_cli("generate", "x", "--image-url", "first-frame.png", *common)
        upload = studio_cli("generate", "x", "--image", str(host.png), *common)
        bodies = server.bodies()
    assert not_http.returncode == 2 and no_scheme.returncode == 2 and upload.returncode == 2
    assert "--image-url must be an http:// or https:// address the server can fetch" in not_http.stderr
    assert "'first-frame.png'" in no_scheme.stderr
    assert NO_UPLOAD in upload.stderr and "--image-url" in NO_UPLOAD
    assert not_http.stdout == no_scheme.stdout == upload.stdout == ""
    assert bodies == [] and host.fetched == []  # nothing sent


# ---- the run machinery -----------------------------------------------------------------------------
def test_a_blocked_prompt_with_keep_going_fails_with_the_servers_message(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path, "--keep-going") as server:
        blocked, fine = run_requests([server.url], store, prompts=[BLOCKED, "a red circle"], concurrency=2)
    assert blocked.state is RequestState.FAILED and blocked.guardrail_blocked
    assert "Guardrail blocked text2video generation" in blocked.error
    assert fine.state is RequestState.DONE and fine.video_path.exists()
    assert store.request_row(blocked.id)["state"] == "failed"


def test_a_worker_failure_answers_500_text_and_the_request_fails_with_it(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path) as server:
        (view,) = run_requests([server.url], store, prompts=["a worker-crash scene"])
    assert view.state is RequestState.FAILED and not view.guardrail_blocked
    assert "CUDA error: an illegal memory access" in view.error and "(HTTP 500)" in view.error
    assert list((tmp_path / "out" / "videos").glob("*/*.mp4")) == []


def test_guardrails_off_per_request_is_refused_with_the_reason(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path, "--no-guardrails") as server:
        (view,) = run_requests([server.url], store, guardrails=False)
        made = server.videos()
    assert view.state is RequestState.FAILED and view.error == GUARDRAILS_AT_START
    assert made == []  # never sent


def test_a_server_killed_mid_call_fails_the_request_with_a_clear_reason(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path, delay_s=60) as server:
        pool = EndpointPool.from_urls([server.url], client_class=CosmosFrameworkClient)

        async def main() -> RequestView:
            run = Run(RunSpec(prompts=["a red circle"], **SMALL), pool, store, request_timeout_s=120)
            async for view in run.updates():
                if view.state is RequestState.RUNNING and server.process.poll() is None:
                    await asyncio.to_thread(server.kill)  # the request is at the server: kill it there
            await pool.close()
            return run.views[0]

        started = time.monotonic()
        view = asyncio.run(main())
    assert view.state is RequestState.FAILED and time.monotonic() - started < 30
    assert "broke off the request while making the video" in view.error and "not sent again" in view.error
    assert store.request_row(view.id)["state"] == "failed"


def test_a_call_past_the_timeout_fails_and_says_the_server_may_still_make_it(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path, delay_s=30) as server:
        started = time.monotonic()
        (view,) = run_requests([server.url], store, timeout_s=1.0)
        waited = time.monotonic() - started
    assert view.state is RequestState.FAILED and waited < 10
    assert "made no answer within 1 s" in view.error and "may still make the video" in view.error


def test_several_servers_share_the_requests(tmp_path):
    store = OutputStore(tmp_path / "out")
    with cosmos_server(tmp_path, delay_s=1.0) as one, cosmos_server(tmp_path, delay_s=1.0) as two:
        views = run_requests([one.url, two.url], store, prompts=["a", "b", "c", "d"], concurrency=4)
        made = (len(one.videos()), len(two.videos()))
    assert [view.state for view in views] == [RequestState.DONE] * 4
    assert made == (2, 2)  # the least busy server gets each request
    assert {view.endpoint for view in views} == {one.url, two.url}


def test_a_server_that_is_down_sends_the_request_to_another(tmp_path):
    store = OutputStore(tmp_path / "out")
    down = f"http://127.0.0.1:{free_port()}"
    with cosmos_server(tmp_path) as up:
        (view,) = run_requests([down, up.url], store)
    assert view.state is RequestState.DONE and view.endpoint == up.url


# ---- the page, through its API ---------------------------------------------------------------------
def request_rows(outputs: Path) -> list[tuple[str, str, str | None, str | None]]:
    with sqlite3.connect(outputs / "history.sqlite3") as db:
        return list(db.execute("SELECT prompt, state, job_id, error FROM requests ORDER BY created_at"))


def wait_for_rows(outputs: Path, check, what: str, timeout_s: float = 60.0) -> list:
    """The history's rows once `check` holds for them."""

    def current() -> list:
        return request_rows(outputs) if (outputs / "history.sqlite3").exists() else []

    def checked() -> list:
        rows = current()
        return rows if check(rows) else []

    return wait_for(checked, what, timeout_s, detail=lambda: f"rows {current()}")


def generate(client: Client, prompt: str, **values: object) -> str:
    form = {"prompts": prompt, "seed": "3", "seed_policy": "fixed", "copies": 1, "concurrency": 1, **SMALL}
    return client.predict(**{**form, **values}, api_name="/generate")


def test_the_page_generates_shows_blocks_and_cancels_on_the_server(tmp_path):
    outputs = tmp_path / "outputs"
    with cosmos_server(tmp_path, delay_s=2.0) as server, image_host(tmp_path) as host:
        studio = start_studio(outputs, tmp_path / "studio.log", "--engine", "cosmos-framework", "--url", server.url)
        try:
            config = httpx.get(studio.url + "/config", timeout=10).json()
            props = {
                c["props"]["elem_id"]: c["props"] for c in config["components"] if c.get("props", {}).get("elem_id")
            }
            # The guardrails switch cannot be used, and says why.
            switch = props["guardrails"]
            assert switch["interactive"] is False and switch["info"] == GUARDRAILS_AT_START
            # The image goes as a URL: the upload is hidden, the URL field is there and says why.
            assert props["image"]["visible"] is False and props["image-url"]["visible"] is True
            assert props["image-url"]["info"] == NO_UPLOAD

            client = Client(studio.url, verbose=False)
            # What the server cannot take is refused in the status line, and nothing is sent.
            for refused, message in (
                ({"image_url": "ftp://127.0.0.1/first-frame.png"}, "image URL must be an http:// or https:// address"),
                ({"image_url": "first-frame.png"}, "got 'first-frame.png'"),
                ({"image": handle_file(str(host.png))}, NO_UPLOAD),
            ):
                status = generate(client, "never sent", **refused)
                assert status.startswith("**cannot generate**") and message in as_shown(status), status
            assert server.bodies() == [] and host.fetched == []

            # The first frame from a URL: in the server's body as the contract says, fetched by the server.
            assert generate(client, "a red circle", image_url=host.url).startswith("queued 1 request")
            rows = wait_for_rows(outputs, lambda rows: rows and rows[0][1] in ("done", "failed"), "the request to end")
            assert rows[0][1] == "done", rows
            assert len(list((outputs / "videos").glob("*/*.mp4"))) == 1
            (body,) = server.bodies()
            assert (body["vision_path"], body["model_mode"]) == (host.url, "image2video") and host.fetched
            assert json.loads(request_parameters(outputs, "a red circle")["image_reference"]) == {"image_url": host.url}

            assert generate(client, BLOCKED).startswith("queued 1 request")
            rows = wait_for_rows(outputs, lambda rows: len(rows) == 2 and rows[1][1] == "failed", "the block to fail")
            assert "Guardrail blocked text2video generation" in rows[1][3] and "(HTTP 500)" in rows[1][3]

            # Cancel while the server makes it: the studio stops waiting; the server finishes anyway.
            made_before = len(server.videos())
            assert generate(client, "a slow blue square").startswith("queued 1 request")
            wait_for_rows(outputs, lambda rows: len(rows) == 3 and rows[2][2], "the request to reach the server")
            request_id = wait_for_request_id(outputs, "a slow blue square")
            status = client.predict(request_id=request_id, api_name="/cancel")
            assert "cancelled 1 request" in status, status
            wait_for(lambda: len(server.videos()) > made_before, "the server to make the cancelled video", 30)
            assert len(server.videos()) == made_before + 1  # made at the server all the same
            rows = request_rows(outputs)
            assert rows[2][1] == "cancelled", rows
            assert len(list((outputs / "videos").glob("*/*.mp4"))) == 1  # only the first request's
        finally:
            stop_studio(studio)


def request_parameters(outputs: Path, prompt: str) -> dict:
    """The request's fields as its history row records them."""
    with sqlite3.connect(outputs / "history.sqlite3") as db:
        (parameters,) = db.execute("SELECT parameters FROM requests WHERE prompt = ?", (prompt,)).fetchone()
    return json.loads(parameters)


def wait_for_request_id(outputs: Path, prompt: str) -> str:
    with sqlite3.connect(outputs / "history.sqlite3") as db:
        (request_id,) = db.execute("SELECT id FROM requests WHERE prompt = ?", (prompt,)).fetchone()
    return request_id


# ---- the bench -------------------------------------------------------------------------------------
def test_bench_reports_latency_only_and_says_why(tmp_path):
    out = tmp_path / "report"
    with cosmos_server(tmp_path) as server:
        engine = ("--engine", "cosmos-framework", "--url", server.url)
        grid = ("--requests", "2", "--concurrency", "1", "--tier", "256p", "--aspect", "1:1", "--frames", "5")
        result = studio_cli("bench", *engine, *grid, "--steps", "2", "--warmup", "0", "--out", str(out), timeout_s=180)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["engine"] == "cosmos-framework" and report["notes"] == [LATENCY_ONLY]
    (cell,) = report["cells"]
    assert cell["completed"] == 2 and cell["failed"] == 0 and cell["latency_p50_s"] >= 0.3
    assert cell["queue_wait_mean_s"] is None and cell["inference_mean_s"] is None
    assert all(row["queue_wait_s"] is None and row["inference_s"] is None for row in report["requests"])


# ---- a studio restart ------------------------------------------------------------------------------
def test_a_request_left_at_the_server_by_an_earlier_studio_fails_as_lost_with_the_reason(tmp_path):
    """No job id to follow it by: once the restarted studio reads its leftovers with this engine's client, such
    a request fails with that reason (never followed, never sent again)."""
    with cosmos_server(tmp_path) as server:
        earlier = OutputStore(tmp_path / "out")
        pool = EndpointPool.from_urls([server.url], client_class=CosmosFrameworkClient)
        run = Run(RunSpec(prompts=["left behind"], **SMALL), pool, earlier)
        view = run.views[0]
        view.send_to(server.url)
        run.recorder.sent(view)
        view.accept(JOB_ID_PREFIX + "req_left_behind")
        run.recorder.accepted(view)
        earlier.close()

        later = OutputStore(tmp_path / "out")

        async def resume() -> RequestView:
            found = await leftovers_to_follow(later, client_class=CosmosFrameworkClient)
            assert found is not None
            followed_pool, rows = found
            resumed = Run.resume(rows, followed_pool, later)
            (ended,) = await resumed.wait()
            return ended

        ended = asyncio.run(resume())
        made = server.videos()
    assert ended.state is RequestState.FAILED
    assert ended.error == "lost after a studio restart: " + NO_FOLLOW_UP
    assert later.request_row(view.id)["state"] == "failed" and made == []
