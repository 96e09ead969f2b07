"""A studio restarted on the same outputs follows up what the last one left unfinished as it starts, without
waiting for a browser: requests at a server that still answers are finished there, those whose server is gone
are marked lost at once. They used to stay 'queued' (through API calls too) until someone opened the page, and
meanwhile counted toward the visitor's videos per hour."""

from __future__ import annotations

import signal
import sqlite3

from gradio_client import Client

from tests.browser.conftest import RunningStudio, start_studio, stop_studio
from tests.waiting import wait_for

ALICE = ("alice", "alice-pass")
AT_A_SERVER = ("queued", "running")
LONG = {"tier": "256p", "aspect": "1:1", "frames": 5, "seed": "1", "seed_policy": "fixed"}


def rows(database) -> list[tuple]:
    if not database.exists():
        return []
    with sqlite3.connect(database) as db:
        return db.execute(
            "SELECT position, state, job_id, error FROM requests ORDER BY created_at, position"
        ).fetchall()


def sigterm(studio: RunningStudio) -> None:
    """The studio goes as a service manager stops it; what it had at servers stays there."""
    try:
        studio.process.send_signal(signal.SIGTERM)
        studio.process.wait(60)
    finally:
        stop_studio(studio)


def test_requests_whose_engine_went_with_the_studio_are_lost_at_start_and_count_no_more(tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    database = outputs / "history.sqlite3"
    flags = ("--auth", ":".join(ALICE), "--visitor-max-videos-per-hour", "5")
    studio = start_studio(outputs, log, *flags)
    try:
        status = Client(studio.url, auth=ALICE, verbose=False).predict(
            # The tier's 189 frames at 200 steps: every request is still at the engine when the studio goes.
            prompts="a red circle moving left",
            copies=5,
            concurrency=5,
            steps=200,
            **{**LONG, "frames": 189},
            api_name="/generate",
        )
        assert status.startswith("queued 5 requests"), status
        wait_for(
            lambda: len(found := rows(database)) == 5 and all(row[2] for row in found),
            "the 5 requests to reach the studio's engine",
            120,
            detail=lambda: str(rows(database)),
        )
    finally:
        sigterm(studio)  # its embedded engine stops with it, and the jobs there with it
    # The engine runs one at a time, and goes down as the studio goes: what the studio saw of that before its own
    # end (it follows each job's events) is settled already; what was still queued there is left for the next start.
    left = [row for row in rows(database) if row[1] in AT_A_SERVER and row[2]]
    assert left, rows(database)

    studio = start_studio(outputs, log, *flags)
    try:
        # No page is opened: the studio's start follows them up, and finds their server gone.
        left_ids = {row[0] for row in left}
        settled = wait_for(
            lambda: (found := rows(database)) and not any(row[1] in AT_A_SERVER for row in found) and found,
            "the earlier studio's requests to leave 'queued' without a page",
            60,
            detail=lambda: str(rows(database)),
        )
        followed = [row for row in settled if row[0] in left_ids]
        assert all(row[1] in ("lost", "failed") for row in followed), settled
        assert all("restart" in (row[3] or "") for row in followed), settled
        # Lost, they no longer count toward alice's 5 videos an hour.
        again = Client(studio.url, auth=ALICE, verbose=False).predict(
            prompts="one more", copies=1, concurrency=1, steps=2, **LONG, api_name="/generate"
        )
        assert again.startswith("queued 1 request"), again
    finally:
        stop_studio(studio)


def test_a_request_still_at_a_remote_server_is_finished_after_a_restart_without_a_page(engine, tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    database = outputs / "history.sqlite3"
    remote = ("--engine", "remote", "--url", engine.base_url)
    studio = start_studio(outputs, log, *remote)
    try:
        status = Client(studio.url, verbose=False).predict(
            prompts="a blue square moving up", copies=1, concurrency=1, steps=100, **LONG, api_name="/generate"
        )
        assert status.startswith("queued 1 request"), status
        wait_for(lambda: (found := rows(database)) and found[0][2], "the request to reach the engine", 120)
    finally:
        sigterm(studio)
    (before,) = rows(database)
    assert before[1] in AT_A_SERVER

    studio = start_studio(outputs, log, *remote)
    try:
        (after,) = wait_for(
            lambda: (found := rows(database)) and found[0][1] not in AT_A_SERVER and found,
            "the request to be followed up to its end without a page",
            240,
            detail=lambda: str(rows(database)),
        )
    finally:
        stop_studio(studio)
    assert after[1] == "done" and after[2] == before[2], after  # the same job, finished and downloaded
    assert len(list((outputs / "videos").glob("*/*.mp4"))) == 1
