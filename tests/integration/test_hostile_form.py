"""What a hostile caller of the page's API sends gets the studio's own message, field by field, and makes nothing:
values Gradio's pre-processing used to choke on ("abc" frames, NaN or infinite numbers, fractions of a copy, a
non-image renamed .png, a file path of the caller's choosing), a tile of another visitor's, and refusals that read
as typed. A real studio on its embedded engine, driven with gradio_client."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator

import httpx
import pytest
from gradio_client import Client, handle_file

from tests.browser.conftest import RunningStudio, start_studio, stop_studio

GOOD = {"prompts": "a red circle", "tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "copies": 1}
UPSTREAM = "upstream Gradio app has raised an exception"


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("hostile-form")
    running = start_studio(folder / "outputs", folder / "studio.log")
    yield running
    stop_studio(running)


def requests_made(studio: RunningStudio) -> int:
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        return db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("frames", "abc", "frames must be a whole number"),
        ("frames", math.nan, "frames must be a whole number"),
        ("frames", math.inf, "frames must be a whole number"),
        ("frames", 2.5, "frames must be a whole number"),
        ("steps", "abc", "steps must be a whole number"),
        ("steps", math.nan, "steps must be a whole number"),
        ("copies", 1.5, "copies per prompt must be a whole number"),
        ("copies", math.inf, "copies per prompt must be a whole number"),
        ("guidance", "abc", "guidance must be a number"),
        ("concurrency", "many", "concurrency must be a whole number"),
    ],
)
def test_a_bad_number_gets_its_fields_message_and_makes_nothing(studio, field, value, said):
    before = requests_made(studio)
    status = generate_raw(studio, {**GOOD, field: value})
    assert status.startswith("**cannot generate**") and said in status, status
    assert requests_made(studio) == before
    assert UPSTREAM not in status


def generate_raw(studio: RunningStudio, values: dict) -> str:
    """/generate called over Gradio's HTTP API by hand, as a hostile caller does: NaN and Infinity go as JSON's
    non-standard tokens, which gradio_client would not send."""
    client = Client(studio.url, verbose=False)
    names = [
        p["parameter_name"] for p in client.view_api(return_format="dict")["named_endpoints"]["/generate"]["parameters"]
    ]
    defaults = {
        p["parameter_name"]: p.get("parameter_default")
        for p in client.view_api(return_format="dict")["named_endpoints"]["/generate"]["parameters"]
    }
    body = json.dumps({"data": [values.get(name, defaults.get(name)) for name in names]})
    with httpx.Client(base_url=studio.url, timeout=60) as http:
        event = http.post("/gradio_api/call/generate", content=body, headers={"content-type": "application/json"})
        assert event.status_code == 200, event.text
        answer = http.get(f"/gradio_api/call/generate/{event.json()['event_id']}").text
    data = [line.removeprefix("data:").strip() for line in answer.splitlines() if line.startswith("data:")]
    return str(json.loads(data[-1])[0]) if data and data[-1].startswith("[") else answer


def test_a_non_image_renamed_png_and_a_path_of_the_callers_choosing_are_refused(studio, tmp_path):
    client = Client(studio.url, verbose=False)
    disguised = tmp_path / "photo.png"
    disguised.write_text("not an image at all")
    status = client.predict(**GOOD, image=handle_file(str(disguised)), api_name="/generate")
    assert "not a readable image" in status, status
    # A path on the studio's machine, not an upload: refused before anything reads it.
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(b"\x89PNG\r\n\x1a\n")
    status = generate_raw(studio, {**GOOD, "image": {"path": str(elsewhere)}})
    assert "only a file uploaded with the form" in status, status


def test_refusals_read_as_typed_not_escaped(studio):
    client = Client(studio.url, verbose=False)
    _, note = client.predict(run_id="run_that_is'nt", api_name="/export_json")
    assert "run_that_is'nt" in note and "&#x27;" not in note
    status = client.predict(**{**GOOD, "prompts": "   "}, api_name="/generate")
    assert "&#x27;" not in status and "&quot;" not in status


def test_the_studio_log_has_no_traceback_from_hostile_values(studio):
    log = studio.log.read_text(errors="replace")
    assert "Traceback" not in log and UPSTREAM not in log, log[-3000:]
