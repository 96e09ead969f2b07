"""Why a managed server crashed, in the lines of its log that say so: what it wrote after it was ready that is not
routine (its last traceback, else its error lines), never its start-up banner (command, model path, port, warnings).
Real subprocesses: the embedded engine killed mid-request, and a small server that dies with a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import httpx

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.launchers import LaunchSpec
from studio.backend.servers.supervisor import ManagedServer, ServerState
from tests.conftest import MODEL_DIR, engine_settings, start_engine
from tests.waiting import wait_for, wait_for_async

# A server that starts as the real ones do (a banner with its model path and port, a Python warning, progress
# bars, INFO records), is ready when /health answers, and on GET /crash fails one request with a traceback (a
# Python warning and routine lines first) and dies of it.
CRASHING_SERVER = textwrap.dedent(
    """
    import sys, threading, warnings
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    port = int(sys.argv[1])
    print("INFO 12-01 10:00:00 [serve.py:12] loading /models/secret-model-path on cuda:0", flush=True)
    warnings.warn("`torch_dtype` is deprecated", FutureWarning)
    print("Loading pipeline components...: 100%|##########| 3/3 [00:00<00:00, 81.97it/s]", flush=True)
    print("WARNING 12-01 10:00:01 [serve.py:40] start-up warning: no compile cache", flush=True)
    crash = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/crash":
                crash.set()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "healthy"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)", flush=True)
    crash.wait()

    def denoise(step):
        if step == 3:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def generate():
        print("2026-12-01 10:00:05,001 INFO studio.engine.jobs: job video_gen_1 started", flush=True)
        warnings.warn("a warning of the request itself", UserWarning)
        for step in range(5):
            print(f"  {step * 20}%|##        | {step}/5 [00:01<00:04,  1.00it/s]", flush=True)
            denoise(step)

    generate()
    """
)


def crashing_server(tmp_path: Path) -> ManagedServer:
    script = tmp_path / "crashing_server.py"
    script.write_text(CRASHING_SERVER)
    return ManagedServer(
        lambda port: LaunchSpec(name="crashing", argv=[sys.executable, str(script), str(port)]),
        log_path=tmp_path / "crashing.log",
        init_timeout_s=60,
    )


def crashed(server: ManagedServer) -> bool:
    return server.state is ServerState.CRASHED


def test_a_crash_with_a_traceback_is_explained_by_the_traceback_alone(tmp_path):
    server = crashing_server(tmp_path)
    server.start()
    try:
        port = server.port
        httpx.get(server.base_url + "/crash", timeout=5)
        wait_for(lambda: crashed(server), "the server to crash", timeout_s=30, detail=lambda: str(server.log_tail()))
        assert server.exit_code == 1
        lines = server.crash_lines(5)
        assert lines[-1] == "RuntimeError: CUDA error: an illegal memory access was encountered"
        assert len(lines) == 5 and any("in denoise" in line for line in lines)
        whole = server.crash_lines(100)
        assert whole[0] == "Traceback (most recent call last):" and whole[-1] == lines[-1]
        # Nothing of the start-up, nor the routine lines and the warning just before the crash.
        for line in whole:
            for banner in ("secret-model-path", str(port), "Warning", "warnings.warn", "INFO", "%|", "[studio]"):
                assert banner not in line, (banner, whole)
        # The log itself still has all of it.
        log = "\n".join(server.log_tail(400))
        assert "secret-model-path" in log and "FutureWarning" in log and f"127.0.0.1:{port}" in log
    finally:
        server.stop()


def test_a_killed_engine_has_no_lines_that_explain_its_crash_and_quotes_none_of_its_start_up(tmp_path):
    server = start_engine(tmp_path)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            fields = {"prompt": "a long one", "size": "320x192", "num_frames": "33", "num_inference_steps": "200"}
            job = http.post("/v1/videos", files={name: (None, value) for name, value in fields.items()}).json()

            def running() -> bool:
                record = http.get(f"/v1/videos/{job['id']}").json()
                return record["status"] == "in_progress" and record["progress"] > 0

            wait_for(running, "the job to run", timeout_s=60)
        os.kill(server.pid, signal.SIGKILL)
        wait_for(lambda: crashed(server), "the engine to crash", timeout_s=30)
        assert server.exit_code == -9
        assert server.crash_lines(5) == []  # killed: it wrote nothing about it
        assert any("Uvicorn running on" in line for line in server.log_tail(50))  # its log keeps the banner
    finally:
        server.stop()


def test_an_in_flight_request_fails_with_the_crash_reason_and_not_the_start_up_banner(tmp_path):
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05)
    controller = StudioController(settings)
    controller.start()
    port = controller.fleet.server.port

    async def main():
        run = controller.new_run(RunSpec(prompts=["a long one"], tier="256p", frames=33, steps=200))
        run.start()
        view = run.views[0]
        await wait_for_async(lambda: view.state is RequestState.RUNNING, "the request running at the engine", 120)
        os.kill(controller.fleet.server.pid, signal.SIGKILL)
        await run.wait()
        return view

    try:
        view = asyncio.run(main())
        assert view.state is RequestState.FAILED
        assert view.error == "the server crashed (exit code -9)", view.error
        for banner in (str(port), str(MODEL_DIR), "Uvicorn", "startup", "INFO"):
            assert banner not in view.error
    finally:
        controller.close()
