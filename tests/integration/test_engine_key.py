"""A managed engine started without a key gets a random one: it answers the studio alone. Without one, the embedded
engine's GET /v1/videos listed every visitor's prompts, and /content served their videos, to any local process.
The key reaches the engine through VLLM_API_KEY in its environment, never its command line or a log."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import httpx
from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import wait_for

QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}


def engine_port(engine_log: Path) -> int | None:
    """The port of the studio's engine, from the command its log starts with."""
    found = re.search(r"--port (\d+)", engine_log.read_text()) if engine_log.exists() else None
    return int(found.group(1)) if found else None


def engine_process(port: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the engine process serving on `port`."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if "studio.engine" in argv and "--port" in argv and argv[argv.index("--port") + 1] == str(port):
                pairs = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                return argv, dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        except (OSError, IndexError):
            continue
    raise AssertionError(f"no engine process on port {port}")


def test_the_studios_own_engine_answers_only_the_studio(tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    studio = start_studio(outputs, log)
    try:
        status = Client(studio.url, verbose=False).predict(
            prompts="a red circle moving left, a visitor's secret",
            copies=1,
            concurrency=1,
            **QUICK,
            api_name="/generate",
        )
        assert status.startswith("queued 1 request"), status
        database = outputs / "history.sqlite3"

        def made() -> tuple | None:
            with sqlite3.connect(database) as db:
                row = db.execute("SELECT state, job_id FROM requests").fetchone()
            return row if row and row[0] == "done" else None

        _, job_id = wait_for(made, "the video, made by the studio with its key", 120)
        port = engine_port(outputs / "logs" / "embedded-server.log")
        assert port is not None
        engine = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{engine}/v1/videos", timeout=10).status_code == 401
        assert httpx.get(f"{engine}/v1/videos/{job_id}/content", timeout=10).status_code == 401
        assert httpx.get(f"{engine}/health", timeout=10).status_code == 200

        argv, environ = engine_process(port)
        key = environ.get("VLLM_API_KEY")
        assert key and len(key) >= 32
        assert "--api-key" not in argv and not any(key in arg for arg in argv)
        listed = httpx.get(f"{engine}/v1/videos", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert listed.status_code == 200 and job_id in listed.text
        for written in (log, outputs / "logs" / "embedded-server.log", database):
            assert key.encode() not in written.read_bytes(), f"the key is in {written.name}"
    finally:
        stop_studio(studio)
