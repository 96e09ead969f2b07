"""The outputs folder is its owner's alone: after a real studio made a video and an export, every folder under it
(itself included) is 0700 and every file 0600 (the history database and its journal, the video, its poster and
sidecar, the export, the logs), the studio's engine writes with the same rights, and the page still serves the
video to the visitor whose run made it."""

from __future__ import annotations

import contextlib
import sqlite3
import stat
from pathlib import Path

import httpx
import psutil
from gradio_client import Client

from studio.ui.file_guard import BROWSER_COOKIE
from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import wait_for

QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}
COOKIE = "PRIVATEcookieR4t_Yq8-Zm3Wx"
RUN_TIMEOUT_S = 240.0


def history(outputs: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(outputs / "history.sqlite3"))


def loose_rights(outputs: Path) -> list[str]:
    """Every path under `outputs` (and itself) whose rights are not 0700 for a folder, 0600 for a file."""
    wrong = []
    for path in [outputs, *outputs.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        wanted = 0o700 if path.is_dir() else 0o600
        if mode != wanted:
            wrong.append(f"{path.relative_to(outputs)}: {oct(mode)}")
    return wrong


def process_umask(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError(f"no umask for process {pid}")


def test_outputs_are_the_owner_s_alone_and_still_served_to_the_run_s_visitor(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    studio = start_studio(outputs, tmp_path / "studio.log", "--allow-anonymous")
    try:
        client = Client(studio.url, verbose=False, httpx_kwargs={"cookies": {BROWSER_COOKIE: COOKIE}})
        status = client.predict(prompts="private-outputs-3c1f", copies=1, concurrency=1, **QUICK, api_name="/generate")
        assert status.startswith("queued"), status

        def finished() -> tuple[str, str] | None:
            with history(outputs) as db:
                row = db.execute(
                    "SELECT run_id, video_path FROM requests WHERE prompt LIKE ? AND state = 'done'",
                    ("%private-outputs-3c1f%",),
                ).fetchone()
            return row

        run_id, video_path = wait_for(finished, "the run's video", RUN_TIMEOUT_S)
        client.predict(run_id=run_id, api_name="/export_json")
        video = Path(video_path)
        assert video.is_file() and video.with_suffix(".json").is_file()
        assert (outputs / "exports").is_dir() and any((outputs / "logs").iterdir())

        assert loose_rights(outputs) == []
        # The engine the studio started writes its files with the same rights.
        engines = psutil.Process(studio.process.pid).children(recursive=True)
        assert engines and all(process_umask(p.pid) == 0o077 for p in engines)

        relative = video.resolve().relative_to(outputs.resolve()).as_posix()
        answer = httpx.get(f"{studio.url}/studio/files/{relative}", cookies={BROWSER_COOKIE: COOKIE}, timeout=30)
        assert answer.status_code == 200 and answer.content[4:8] == b"ftyp"
        other = httpx.get(f"{studio.url}/studio/files/{relative}", cookies={BROWSER_COOKIE: "someone-else"}, timeout=30)
        assert other.status_code == 403
    finally:
        stop_studio(studio)
    assert loose_rights(outputs) == []  # and after the studio stopped (its journal folded back in)
