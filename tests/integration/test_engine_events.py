"""A job's events from the embedded engine (GET /v1/videos/{id}/events, server-sent events): its progress at each
denoising step, its record at each change of state, and the end of the stream once it has finished; a late client
gets the latest progress first; the stream takes the API's key; polling clients see the same job."""

from __future__ import annotations

import json

import httpx
import pytest

from studio.protocol import EVENTS_MEDIA_TYPE, JobRecord, ProgressEvent
from tests.conftest import API_KEY, SMALL

pytestmark = pytest.mark.integration

STREAM_TIMEOUT = httpx.Timeout(120.0, connect=10.0)


def create(base_url: str, headers: dict[str, str] | None = None, **fields: str) -> dict:
    form = {"prompt": "a red circle moving left", **SMALL, **fields}
    created = httpx.post(
        f"{base_url}/v1/videos", files={k: (None, v) for k, v in form.items()}, headers=headers, timeout=30
    )
    assert created.status_code == 200, created.text
    return created.json()


def read_events(base_url: str, job_id: str, headers: dict[str, str] | None = None) -> list[tuple[str, dict]]:
    """Every event of the job's stream, in order, until the server ends it."""
    events: list[tuple[str, dict]] = []
    with httpx.stream(
        "GET", f"{base_url}/v1/videos/{job_id}/events", headers=headers, timeout=STREAM_TIMEOUT
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith(EVENTS_MEDIA_TYPE)
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                assert kind is not None
                events.append((kind, json.loads(line.removeprefix("data: "))))
                kind = None
    return events


def test_the_stream_follows_each_step_and_ends_with_the_finished_record(engine):
    job = create(engine.base_url, num_inference_steps="6")
    events = read_events(engine.base_url, job["id"])
    steps = [ProgressEvent(**data) for kind, data in events if kind == "progress"]
    statuses = [JobRecord(**data).status for kind, data in events if kind == "status"]
    assert [step.step for step in steps] == sorted({step.step for step in steps}) and steps[-1].step == 6
    assert all(step.total_steps == 6 for step in steps)
    assert all(step.step_s is not None and step.step_s >= 0 for step in steps if step.step > 1)
    assert [s.elapsed_s for s in steps] == sorted(s.elapsed_s for s in steps)
    assert statuses[-1] == "completed" and events[-1][0] == "status"  # the stream ends after the finished record
    assert "in_progress" in statuses or steps[0].step > 0
    # Polling sees the same job.
    assert httpx.get(f"{engine.base_url}/v1/videos/{job['id']}", timeout=10).json()["status"] == "completed"
    # Late: the latest progress first, then the record, then the end.
    late = read_events(engine.base_url, job["id"])
    assert [kind for kind, _ in late] == ["progress", "status"]
    assert late[0][1]["step"] == 6 and late[1][1]["status"] == "completed" and late[1][1]["progress"] == 100


def test_a_cancelled_job_ends_its_stream_failed_with_499(engine):
    job = create(engine.base_url, num_inference_steps="200", size="320x192", num_frames="33")
    with httpx.stream("GET", f"{engine.base_url}/v1/videos/{job['id']}/events", timeout=STREAM_TIMEOUT) as stream:
        lines = stream.iter_lines()
        for line in lines:  # its first event arrives: the stream is open
            if line.startswith("data: "):
                break
        assert httpx.delete(f"{engine.base_url}/v1/videos/{job['id']}", timeout=30).status_code in (200, 409)
        rest = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    final = rest[-1]
    assert final["status"] == "failed" and final["error"]["code"] == 499


def test_the_stream_takes_the_api_key_and_names_unknown_jobs(keyed_engine):
    key = {"Authorization": f"Bearer {API_KEY}"}
    job = create(keyed_engine.base_url, headers=key)
    refused = httpx.get(f"{keyed_engine.base_url}/v1/videos/{job['id']}/events", timeout=10)
    assert refused.status_code == 401
    events = read_events(keyed_engine.base_url, job["id"], headers=key)
    assert events[-1][1]["status"] == "completed"
    unknown = httpx.get(f"{keyed_engine.base_url}/v1/videos/video_gen_nope/events", headers=key, timeout=10)
    assert unknown.status_code == 404
