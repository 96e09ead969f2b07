"""The launched studio driven through its public Gradio API with gradio_client."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import log_tail, wait_for


def ended_states(database: Path) -> list[str]:
    """The requests' states once each has ended; [] before."""
    with sqlite3.connect(database) as db:
        states = [row[0] for row in db.execute("SELECT state FROM requests ORDER BY position")]
    return states if states and all(state in ("done", "failed", "cancelled") for state in states) else []


def test_generate_through_the_api(tmp_path):
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        client = Client(studio.url, verbose=False)
        endpoints = client.view_api(return_format="dict")["named_endpoints"]
        assert {"/generate", "/cancel_all", "/cancel", "/rerun"} <= set(endpoints)
        parameters = {p["parameter_name"] for p in endpoints["/generate"]["parameters"]}
        assert {"prompts", "tier", "frames", "steps", "seed", "copies", "concurrency", "image"} <= parameters
        status = client.predict(
            prompts="a red circle\na blue square",
            tier="256p",
            aspect="1:1",
            frames=5,
            steps=2,
            seed="3",
            seed_policy="increment",
            copies=1,
            concurrency=2,
            api_name="/generate",
        )
        assert status.startswith("queued 2 requests")
        database = tmp_path / "outputs" / "history.sqlite3"
        assert wait_for(lambda: ended_states(database), "both requests to end", 240) == ["done", "done"]
        assert len(list((tmp_path / "outputs" / "videos").glob("*/*.mp4"))) == 2
    finally:
        stop_studio(studio)


def test_the_api_key_reaches_the_engine_but_never_the_page_logs_or_files(tmp_path, monkeypatch):
    key = "sk-omni-7f3a9c1e5b2d4068"
    monkeypatch.setenv("OMNI_STUDIO_API_KEY", key)
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        client = Client(studio.url, verbose=False)
        status = client.predict(
            prompts="a key test",
            tier="256p",
            aspect="1:1",
            frames=5,
            steps=2,
            seed="1",
            seed_policy="fixed",
            copies=1,
            concurrency=1,
            api_name="/generate",
        )
        assert status.startswith("queued 1 request")
        sidecars = wait_for(
            lambda: list((tmp_path / "outputs" / "videos").glob("*/*.json")),
            "the video's sidecar",
            240,
            detail=lambda: log_tail(tmp_path / "studio.log", 2000),
        )
        endpoint = json.loads(sidecars[0].read_text())["endpoint"]
        # The key is in force at the engine: without it, the API refuses.
        assert httpx.get(f"{endpoint}/v1/models", timeout=10).status_code == 401
        assert httpx.get(f"{endpoint}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        # ...and nowhere the user or a visitor can read it.
        for path in ("/", "/config", "/gradio_api/info"):
            response = httpx.get(studio.url + path, timeout=10)
            assert key not in response.text, path
        files = [p for p in (tmp_path / "outputs").rglob("*") if p.is_file()] + [tmp_path / "studio.log"]
        assert any(p.suffix == ".log" for p in files) and any(p.suffix == ".sqlite3" for p in files)
        for path in files:
            assert key.encode() not in path.read_bytes(), path
    finally:
        stop_studio(studio)


def test_nothing_beside_the_studios_own_videos_is_served_to_the_browser(tmp_path):
    """Videos, posters, sidecars and exports go to their owners (test_visitors.py); anything else in the outputs
    folder (the history database, logs, a stray file) and anything outside it, to no one."""
    outputs = tmp_path / "outputs"
    studio = start_studio(outputs, tmp_path / "studio.log")
    try:
        inside = outputs / "videos" / "shared.txt"
        inside.parent.mkdir(parents=True, exist_ok=True)
        inside.write_text("a result")
        beside = tmp_path / "private.txt"  # next to the outputs folder, not in it
        beside.write_text("not for the browser")

        def fetch(path: Path) -> httpx.Response:
            return httpx.get(f"{studio.url}/gradio_api/file={path.resolve()}", timeout=10)

        assert fetch(inside).status_code == 403 and "a result" not in fetch(inside).text
        assert fetch(outputs / "history.sqlite3").status_code == 403
        for path in (beside, Path("/etc/passwd"), Path(__file__), outputs / ".." / "private.txt"):
            response = fetch(path)
            assert response.status_code in (403, 404), path
            assert "not for the browser" not in response.text and "root:" not in response.text
    finally:
        stop_studio(studio)


def test_a_program_gets_structured_runs_through_the_api(tmp_path):
    """submit_run answers the run's id and its requests; wait_run answers once it has finished, with each video's
    path and URL; a refusal is a plain sentence, not the page's Markdown; a run that names no tier takes the
    studio's default tier."""
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log", "--default-tier", "480p")
    try:
        client = Client(studio.url, verbose=False)
        queued = client.predict(
            prompts="a red circle moving left\ntwo blue squares growing on black",
            tier="256p",
            aspect="1:1",
            frames=10,
            steps=2,
            seed="3",
            concurrency=2,
            api_name="/submit_run",
        )
        assert queued["run_id"].startswith("run_") and len(queued["requests"]) == 2
        assert queued["note"] == "frames 10 rounded up to 13: the model makes 4k+1 frames"
        # /wait_run is a long-poll: it answers within its cap, `finished` false meaning "ask again".
        done = wait_for(
            lambda: (
                (record := client.predict(run_id=queued["run_id"], timeout_s=240, api_name="/wait_run"))["finished"]
                and record
            ),
            "the run to finish",
            240,
        )
        assert done["finished"] and done["states"] == {"done": 2}
        for item in done["requests"]:
            assert Path(item["video_path"]).is_file() and item["video_url"].startswith(studio.url)
            # With the caller's session (its cookies), the file comes; a stranger without them is refused.
            video = httpx.get(item["video_url"], cookies=client.cookies, timeout=30)
            assert video.status_code == 200 and video.content[4:8] == b"ftyp"
            assert httpx.get(item["video_url"], timeout=30).status_code == 403
        assert client.predict(run_id=queued["run_id"], api_name="/run_status")["finished"]
        with pytest.raises(Exception, match="cannot generate: steps must be from 1 to 200, got 500") as refused:
            client.predict(prompts="a red circle", steps=500, api_name="/submit_run")
        assert "**" not in str(refused.value) and "&#x27;" not in str(refused.value)
        # 350 frames fit 256p's ceiling, not 480p's: refused for the studio's default tier.
        with pytest.raises(Exception, match=r"frames must be between \d+ and 300 for 480p, got 350"):
            client.predict(prompts="a red circle", frames=350, api_name="/submit_run")
        with pytest.raises(Exception, match="no run 'run_nope' of yours"):
            client.predict(run_id="run_nope", api_name="/run_status")
    finally:
        stop_studio(studio)
    # A run the studio no longer holds (a new studio on the same outputs; the board keeps only the newest finished
    # runs too) is answered from history, in the same shape.
    again = start_studio(tmp_path / "outputs", tmp_path / "studio-again.log")
    try:
        client = Client(again.url, verbose=False)
        for api_name in ("/run_status", "/wait_run"):
            record = client.predict(run_id=queued["run_id"], api_name=api_name)
            assert record["run_id"] == queued["run_id"] and record["finished"] and record["states"] == {"done": 2}
            assert [item["id"] for item in record["requests"]] == [item["id"] for item in done["requests"]]
            for item in record["requests"]:
                assert item["seed"] is not None and item["video_url"].startswith(again.url)
                assert httpx.get(item["video_url"], cookies=client.cookies, timeout=30).status_code == 200
    finally:
        stop_studio(again)
