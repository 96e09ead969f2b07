"""The studio built and started as a Hugging Face Space builds and starts it.

A Space does not install the project: it installs `pre-requirements.txt` and `requirements.txt` into its
Python, then runs `python studio/app.py` from the repository with SPACE_ID, GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT set. Here: a fresh venv, those two files alone (pip's cache may serve them), the files of the
checkout a push would send copied beside it, and the app started with a Space's environment, a temp dir standing
in for the Space's persistent storage (OMNI_STUDIO_SPACE_DATA, default /data). The page must answer, make a
video through its API, and keep the history, the mp4 and its sidecar in that storage.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from gradio_client import Client

from studio.backend.servers.supervisor import free_port
from tests.waiting import log_tail, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600  # each pip install; a warm pip cache needs about a minute, a cold one a few
START_TIMEOUT_S = 180
VIDEO_TIMEOUT_S = 180
PROMPT = "a red circle moving left on a white background"
# Variables of this machine's studio or of a Space that must not leak into the Space being simulated.
FOREIGN_ENV = ("OMNI_STUDIO_", "SPACE_", "GRADIO_", "OAUTH_", "VIRTUAL_ENV", "PYTHONPATH", "SYSTEM")


def run_bounded(argv: list[str], timeout: float, **kwargs) -> float:
    """Run a command to completion within `timeout`; its duration in seconds. Fails with its output's tail."""
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert result.returncode == 0, f"{argv[:4]} failed:\n{(result.stdout + result.stderr)[-3000:]}"
    return time.monotonic() - started


def copy_pushed_files(destination: Path) -> None:
    """What a push to the Space sends: the tracked files, and new ones git does not ignore (no venvs, outputs)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = ROOT / relative
        if source.is_file():  # a tracked file deleted in the work tree is not pushed
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def folder_size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def settled_states(database: Path) -> list[str]:
    """The requests' states once none is still on its way; [] before."""
    if not database.exists():
        return []
    with sqlite3.connect(database) as db:
        states = [row[0] for row in db.execute("SELECT state FROM requests ORDER BY position")]
    return states if states and all(state in ("done", "failed", "cancelled", "lost") for state in states) else []


def stop(process: subprocess.Popen) -> None:
    """Stop the app as a Space does (SIGTERM); the engine it started (its own process group) goes with it."""
    started = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    _gone, alive = psutil.wait_procs(started, timeout=30)
    for left in alive:
        left.kill()
    assert not alive, f"the app left {len(alive)} process(es) running: {[p.pid for p in alive]}"


@pytest.mark.long
@pytest.mark.timeout(2 * INSTALL_TIMEOUT_S + START_TIMEOUT_S + VIDEO_TIMEOUT_S + 120)
def test_a_space_built_from_requirements_serves_and_keeps_history_in_its_storage(tmp_path):
    venv, app, data = tmp_path / "venv", tmp_path / "app", tmp_path / "data"
    data.mkdir()
    started = time.monotonic()
    run_bounded([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    # This machine cannot reach PyTorch's CPU index that pre-requirements.txt names (a Space can): one try per
    # package instead of pip's five keeps the unreachable index from costing minutes. torch's CPU build then comes
    # from the wheels this machine has on disk, the rest from PyPI (or pip's cache).
    pip_env = {**os.environ, "PIP_RETRIES": "0"}
    for requirements in ("pre-requirements.txt", "requirements.txt"):
        run_bounded(
            [str(python), "-m", "pip", "install", "--quiet", "-r", str(ROOT / requirements)],
            timeout=INSTALL_TIMEOUT_S,
            env=pip_env,
        )
    installed_s = time.monotonic() - started
    # The environment has what the studio needs, and not the project itself: the app must run from its files.
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u, torch; print(u.find_spec('studio'), torch.version.cuda)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert probe.stdout.split() == ["None", "None"], probe.stdout + probe.stderr  # no studio, torch a CPU build

    copy_pushed_files(app)
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(FOREIGN_ENV)}
    env.update(
        SPACE_ID="omni/studio-test",
        SPACE_HOST="omni-studio-test.hf.space",
        # A Space binds 0.0.0.0; the test stays on loopback. SYSTEM=spaces is left out: with it Gradio would ask
        # the Hub for the sign-in's OAuth app, which only a real Space has.
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        OMNI_STUDIO_ALLOW_ANONYMOUS="true",
        OMNI_STUDIO_SPACE_DATA=str(data),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
    )
    log = tmp_path / "app.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [str(python), "studio/app.py"],
            cwd=app,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_page(url, process, log, START_TIMEOUT_S)
        answered_s = time.monotonic() - started
        said = log.read_text()
        storage = data / "omni-studio"
        assert f"outputs and history in {storage}, the Space's persistent storage" in said, said

        status = Client(url, verbose=False).predict(
            prompts=PROMPT,
            tier="256p",
            aspect="1:1",
            frames=5,
            steps=2,
            seed="7",
            seed_policy="fixed",
            copies=1,
            concurrency=1,
            api_name="/generate",
        )
        assert status.startswith("queued 1 request"), status
        settled = wait_for(
            lambda: settled_states(storage / "history.sqlite3"),
            "the request to end",
            VIDEO_TIMEOUT_S,
            detail=lambda: log_tail(log),
        )
        assert settled == ["done"], log_tail(log)
        videos = list((storage / "videos").glob("*/*.mp4"))
        assert len(videos) == 1
        sidecar = json.loads(videos[0].with_suffix(".json").read_text())
        assert sidecar["parameters"]["prompt"] == PROMPT and sidecar["parameters"]["seed"] == 7
        assert sidecar["video"]["num_frames"] == 5 and sidecar["video"]["bytes"] == videos[0].stat().st_size
        assert not (app / "outputs").exists(), "outputs were written to the app's folder, lost on restart"
        print(
            f"\nSpace-style build: install {installed_s:.0f} s, page answering {answered_s:.0f} s after the venv "
            f"was started, environment {folder_size_mb(venv):.0f} MiB"
        )
    finally:
        stop(process)
