"""What a visitor can read of their own run holds no server internals, and its CSV no formula.

The engine's address (`http://127.0.0.1:PORT`) and the paths of the studio's machine are for operators: a visitor's
API record, sidecar and exports (JSON and CSV) leave them out; an operator's export of the same run keeps them. A
prompt such as `=HYPERLINK(…)` is exported as text, which no spreadsheet runs. A real studio on its embedded
engine, with a visitor and an operator account.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import sqlite3
from collections.abc import Iterator
from urllib.parse import urljoin

import httpx
import pytest
from gradio_client import Client

from tests.browser.conftest import RunningStudio, start_studio, stop_studio
from tests.waiting import wait_for

ACCOUNTS = {"bob": "bob-pass", "olga": "olga-pass"}
RUN_TIMEOUT_S = 240.0
QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}
FORMULA = '=HYPERLINK("http://127.0.0.1:9/x","open")'


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("visitor-records")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "olga")
    yield running
    stop_studio(running)


def client(studio: RunningStudio, user: str) -> Client:
    return Client(studio.url, auth=(user, ACCOUNTS[user]), verbose=False)


def fetch(studio: RunningStudio, url: str, user_client: Client) -> str:
    response = httpx.get(urljoin(studio.url + "/", url), cookies=user_client.cookies, timeout=30)
    assert response.status_code == 200, (url, response.status_code, response.text[:300])
    return response.text


def exported(studio: RunningStudio, user_client: Client, run_id: str, kind: str) -> str:
    """The run's export as the user downloads it: the link the History tab gives, through the studio's file route."""
    link, status = user_client.predict(run_id=run_id, api_name=f"/export_{kind}")
    assert not status, status
    return fetch(studio, html.unescape(re.search(r'href="([^"]+)"', link).group(1)), user_client)


def test_a_visitors_run_tells_them_no_server_internals_and_its_csv_holds_no_formula(studio):
    bob, olga = client(studio, "bob"), client(studio, "olga")
    run_id = bob.predict(prompts=FORMULA, copies=1, concurrency=1, **QUICK, api_name="/submit_run")["run_id"]
    record = wait_for(
        lambda: (r := bob.predict(run_id=run_id, api_name="/run_status"))["finished"] and r,
        "bob's run",
        RUN_TIMEOUT_S,
        poll_s=0.5,
    )
    assert record["states"] == {"done": 1}, record
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        endpoint, video_path = db.execute(
            "SELECT endpoint, video_path FROM requests WHERE run_id = ?", (run_id,)
        ).fetchone()
    assert endpoint.startswith("http://127.0.0.1:") and video_path.startswith("/")
    internals = (endpoint, str(studio.outputs), str(studio.outputs.resolve()))

    def assert_clean(text: str, what: str) -> None:
        assert not [found for found in internals if found in text], (what, text[:2000])

    (request,) = record["requests"]
    assert "video_path" not in request and request["video_url"]
    assert_clean(json.dumps(record), "the /run_status record")
    sidecar = fetch(studio, request["sidecar_url"], bob)
    assert "endpoint" not in json.loads(sidecar)
    assert_clean(sidecar, "the sidecar")
    as_json = exported(studio, bob, run_id, "json")
    assert_clean(as_json, "the JSON export")
    assert json.loads(as_json)["requests"][0]["prompt"] == FORMULA  # JSON is data: kept as typed
    as_csv = exported(studio, bob, run_id, "csv")
    assert_clean(as_csv, "the CSV export")
    (row,) = csv.DictReader(io.StringIO(as_csv))
    assert row["prompt"] == "'" + FORMULA and "endpoint" not in row

    # The operator's export of the same run names the server and the file.
    (row,) = csv.DictReader(io.StringIO(exported(studio, olga, run_id, "csv")))
    assert row["endpoint"] == endpoint and row["video_path"] == video_path and row["prompt"] == "'" + FORMULA
