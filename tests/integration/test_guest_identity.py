"""Guests (--allow-anonymous) of a real studio: what tells one browser from another (its HttpOnly cookie) is a
secret the history never holds, so whoever reads the database cannot act as a guest; the key that turns it into a
guest id stays in the outputs folder, unserved, so a guest keeps their history across a restart. And accounts with
guests is refused at start."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys

import httpx
import pytest
from gradio_client import Client

from studio.backend.access import GUEST_KEY_FILE
from studio.backend.servers.supervisor import free_port
from studio.ui.file_guard import BROWSER_COOKIE
from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import wait_for

RUN_TIMEOUT_S = 240.0
QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}
# What a browser would hold, in the cookie's own alphabet (token_urlsafe), upper case so no hex digest holds it.
COOKIE = "GUESTcookieQ7Zx_Wm4-Rk2Vt9P"


def history(outputs) -> contextlib.closing[sqlite3.Connection]:
    """The history database, closed after use: a connection left open while this process reads the files would
    lose SQLite's locks (POSIX locks go with any descriptor of the file that closes)."""
    return contextlib.closing(sqlite3.connect(outputs / "history.sqlite3"))


def guest(url: str, cookie: str = COOKIE) -> Client:
    return Client(url, verbose=False, httpx_kwargs={"cookies": {BROWSER_COOKIE: cookie}})


def visitors_of(outputs, marker: str) -> set[str]:
    with history(outputs) as db:
        query = "SELECT DISTINCT runs.visitor FROM runs JOIN requests ON requests.run_id = runs.id WHERE prompt LIKE ?"
        return {visitor for (visitor,) in db.execute(query, (f"%{marker}%",))}


def make_video(client: Client, outputs, marker: str) -> str:
    status = client.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate")
    assert status.startswith("queued"), status

    def recorded() -> tuple[str] | None:
        with history(outputs) as db:
            query = "SELECT DISTINCT run_id FROM requests WHERE prompt LIKE ?"
            return db.execute(query, (f"%{marker}%",)).fetchone()

    (run_id,) = wait_for(recorded, f"the guest's run {marker} in the history", 30)

    def done() -> bool:
        with history(outputs) as db:
            states = [s for (s,) in db.execute("SELECT state FROM requests WHERE run_id = ?", (run_id,))]
        return states == ["done"]

    wait_for(done, f"the guest's video {marker}", RUN_TIMEOUT_S)
    (visitor,) = visitors_of(outputs, marker)
    return visitor


def files_holding(outputs, secret: bytes) -> list[str]:
    """Every file under the outputs folder (the history database, its -wal and -shm, sidecars, logs) that holds
    `secret`, as it is or in the cookie's URL-encoded form."""
    forms = {secret, secret.replace(b"-", b"%2D").replace(b"_", b"%5F")}
    return sorted(
        str(path.relative_to(outputs))
        for path in outputs.rglob("*")
        if path.is_file() and any(form in path.read_bytes() for form in forms)
    )


def test_the_history_never_holds_a_guests_cookie_and_a_restart_keeps_the_guest(tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    studio = start_studio(outputs, log, "--allow-anonymous")
    try:
        one = guest(studio.url)
        first = make_video(one, outputs, "guest-before-restart-5e0c")
        assert re.fullmatch(r"guest:[0-9a-f]{32}", first), first
        assert "guest-before-restart-5e0c" in str(one.predict(show="mine", api_name="/history"))
        # History's filters through the API: a search finds the run, another word or a state it is not in do not.
        assert "guest-before-restart-5e0c" in str(one.predict(search="BEFORE-restart", api_name="/history"))
        assert "guest-before-restart-5e0c" not in str(one.predict(search="nowhere-9q", api_name="/history"))
        assert "guest-before-restart-5e0c" not in str(one.predict(state="failed", api_name="/history"))
        # While the studio runs (the database's -wal still open), and after: the cookie is nowhere.
        assert (outputs / "history.sqlite3").exists()
        assert files_holding(outputs, COOKIE.encode()) == []

        # The key is the studio's own: only its owner reads it, and no route serves it.
        key_file = outputs / GUEST_KEY_FILE
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        key = key_file.read_text().strip()
        cookies = {BROWSER_COOKIE: COOKIE}
        for route in (f"studio/files/{GUEST_KEY_FILE}", f"gradio_api/file={key_file.resolve()}"):
            answer = httpx.get(f"{studio.url}/{route}", cookies=cookies, timeout=30)
            assert answer.status_code != 200 and key not in answer.text, route
    finally:
        stop_studio(studio)
    assert files_holding(outputs, COOKIE.encode()) == []
    with history(outputs) as db:  # nor the key
        assert key not in str(db.execute("SELECT * FROM runs").fetchall())

    again = start_studio(outputs, log, "--allow-anonymous")
    try:
        one, other = guest(again.url), guest(again.url, "ANOTHERcookieJ3k_Pq8-Lm5Xw2")
        assert "guest-before-restart-5e0c" in str(one.predict(show="mine", api_name="/history"))
        assert "guest-before-restart-5e0c" not in str(other.predict(show="mine", api_name="/history"))
        assert make_video(one, outputs, "guest-after-restart-77d1") == first
        assert files_holding(outputs, COOKIE.encode()) == []
    finally:
        stop_studio(again)


def test_accounts_with_guests_are_refused_at_start_with_the_reason(tmp_path):
    flags = ["--auth", "a:b", "--allow-anonymous", "--port", str(free_port()), "--out", str(tmp_path / "outputs")]
    process = subprocess.Popen(
        [sys.executable, "-m", "studio", "ui", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a studio that starts after all is stopped with its engine
    )
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)  # the studio stops its engine on SIGTERM
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        pytest.fail("the studio started with both --auth and --allow-anonymous")
    assert process.returncode == 2, stderr
    assert "omni-studio: error: --allow-anonymous and --auth cannot be used together: " in stderr
    assert "Traceback" not in stderr
