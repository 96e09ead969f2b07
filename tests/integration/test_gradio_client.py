"""The launched studio driven through its public Gradio API with gradio_client."""

from __future__ import annotations

import sqlite3
import time

import pytest
from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio

pytestmark = pytest.mark.integration


def test_generate_through_the_api(tmp_path):
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        client = Client(studio.url, verbose=False)
        endpoints = client.view_api(return_format="dict")["named_endpoints"]
        assert {"/generate", "/cancel_all", "/cancel", "/rerun"} <= set(endpoints)
        status = client.predict(
            "a red circle\na blue square",
            "",
            "256p",
            "1:1",
            5,
            "24",
            2,
            6.0,
            "3",
            "increment",
            1,
            2,
            True,
            False,
            None,
            api_name="/generate",
        )
        assert status.startswith("queued 2 requests")
        database = tmp_path / "outputs" / "history.sqlite3"
        deadline = time.monotonic() + 240
        states: list[str] = []
        while time.monotonic() < deadline:
            with sqlite3.connect(database) as db:
                states = [row[0] for row in db.execute("SELECT state FROM requests ORDER BY position")]
            if states and all(state in ("done", "failed", "cancelled") for state in states):
                break
            time.sleep(0.2)
        assert states == ["done", "done"]
        assert len(list((tmp_path / "outputs" / "videos").glob("*/*.mp4"))) == 2
    finally:
        stop_studio(studio)
