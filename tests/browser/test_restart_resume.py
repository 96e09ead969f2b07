"""The studio is restarted mid-run: what the server still has is followed up by job id and finished; what
never reached a server is marked lost, never dropped."""

from __future__ import annotations

import signal
import sqlite3

from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import wait_for


def rows(database) -> list[tuple]:
    with sqlite3.connect(database) as db:
        return db.execute("SELECT position, state, job_id, error FROM requests ORDER BY position").fetchall()


def wait_rows(database, predicate, timeout_s: float) -> list[tuple]:
    def current() -> list[tuple]:
        return rows(database) if database.exists() else []

    def arrived() -> list[tuple]:
        found = current()
        return found if found and predicate(found) else []

    return wait_for(arrived, "the history to get there", timeout_s, detail=lambda: f"rows {current()}")


def test_restart_follows_up_jobs_by_id(browser, engine, tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    remote = ["--engine", "remote", "--url", engine.base_url]
    studio = start_studio(outputs, log, *remote)
    database = outputs / "history.sqlite3"
    try:
        status = Client(studio.url, verbose=False).predict(
            prompts="first, at the server\nsecond, still in the studio",
            tier="256p",
            aspect="16:9",
            frames=33,
            steps=120,
            seed="1",
            seed_policy="fixed",
            copies=1,
            concurrency=1,
            api_name="/generate",
        )
        assert status.startswith("queued 2 requests")
        wait_rows(database, lambda r: r[0][1] == "queued" and r[0][2], 120)  # at the server, with a job id
        studio.process.send_signal(signal.SIGTERM)
        studio.process.wait(60)
    finally:
        stop_studio(studio)
    before = rows(database)
    assert before[0][1] == "queued" and before[1][1] == "waiting" and before[1][2] is None

    studio = start_studio(outputs, log, *remote)
    try:
        page = browser.new_page()
        page.goto(studio.url)  # opening the page follows up what the last studio left
        after = wait_rows(database, lambda r: r[0][1] in ("done", "failed", "lost"), 240)
        page.close()
    finally:
        stop_studio(studio)
    assert after[0][1] == "done" and after[0][2] == before[0][2]  # the same job, finished and downloaded
    assert after[1][1] == "lost" and "before a server took this request" in after[1][3]
    assert len(list((outputs / "videos").glob("*/*.mp4"))) == 1
