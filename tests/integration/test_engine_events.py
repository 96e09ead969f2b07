"""A job's events from the embedded engine (GET /v1/videos/{id}/events, server-sent events): its progress at each
denoising step, its previews, its record at each change of state, and the end of the stream once it has finished; a
late client gets the latest progress and preview first; GET /v1/videos/{id}/preview answers the latest preview as
an image; both take the API's key; polling clients see the same job."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator

import httpx
import pytest
from PIL import Image

from studio.backend.servers.supervisor import ManagedServer
from studio.protocol import (
    EVENTS_MEDIA_TYPE,
    PREVIEW_STEP_HEADER,
    PREVIEW_TOTAL_STEPS_HEADER,
    JobRecord,
    PreviewEvent,
    ProgressEvent,
)
from tests.conftest import API_KEY, SMALL, start_engine
from tests.waiting import wait_for

STREAM_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
# A 16:9 job of the small model long enough for several previews at a short interval.
WIDE = {"size": "512x288", "num_frames": "33", "num_inference_steps": "24"}


@pytest.fixture(scope="module")
def preview_engine(tmp_path_factory) -> Iterator[ManagedServer]:
    """An engine that makes a preview every 50 ms at most."""
    server = start_engine(tmp_path_factory.mktemp("previews"), engine_preview_interval_s=0.05)
    yield server
    server.stop()


def create(base_url: str, headers: dict[str, str] | None = None, **fields: str) -> dict:
    form = {"prompt": "a red circle moving left", **SMALL, **fields}
    created = httpx.post(
        f"{base_url}/v1/videos", files={k: (None, v) for k, v in form.items()}, headers=headers, timeout=30
    )
    assert created.status_code == 200, created.text
    return created.json()


def events_of(response: httpx.Response) -> Iterator[tuple[str, dict]]:
    kind = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            assert kind is not None
            yield kind, json.loads(line.removeprefix("data: "))
            kind = None


def read_events(base_url: str, job_id: str, headers: dict[str, str] | None = None) -> list[tuple[str, dict]]:
    """Every event of the job's stream, in order, until the server ends it."""
    with httpx.stream(
        "GET", f"{base_url}/v1/videos/{job_id}/events", headers=headers, timeout=STREAM_TIMEOUT
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith(EVENTS_MEDIA_TYPE)
        return list(events_of(response))


def preview_image(event: dict) -> Image.Image:
    """A preview event's image, decoded."""
    url = PreviewEvent(**event).image
    header, data = url.split(",", 1)
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert header == f"data:image/{image.format.lower()};base64"
    return image


def assert_aspect(image: Image.Image, width: int, height: int) -> None:
    assert abs(image.width / image.height - width / height) <= 0.03 * width / height, (image.size, width, height)
    assert max(image.size) <= 256


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
    # Late: the latest progress first, then the latest preview (its last step's), then the record, then the end.
    late = read_events(engine.base_url, job["id"])
    assert [kind for kind, _ in late] == ["progress", "preview", "status"]
    assert late[0][1]["step"] == 6 and late[1][1]["step"] == 6
    assert late[2][1]["status"] == "completed" and late[2][1]["progress"] == 100


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


def test_the_stream_ends_on_a_job_refused_at_once(engine):
    form = {"prompt": "a scene of gore", **SMALL}
    refused = httpx.post(f"{engine.base_url}/v1/videos", files={k: (None, v) for k, v in form.items()}, timeout=30)
    assert refused.status_code == 400
    events = read_events(engine.base_url, refused.json()["id"])
    assert [kind for kind, _ in events] == ["status"] and events[0][1]["status"] == "failed"
    assert httpx.get(f"{engine.base_url}/v1/videos/{refused.json()['id']}/preview", timeout=10).status_code == 204


def test_previews_arrive_during_a_job_each_an_image_of_its_aspect(preview_engine):
    for size in ("512x288", "288x512"):
        width, height = (int(side) for side in size.split("x"))
        job = create(preview_engine.base_url, **{**WIDE, "size": size})
        events = read_events(preview_engine.base_url, job["id"])
        previews = [(index, data) for index, (kind, data) in enumerate(events) if kind == "preview"]
        steps = [ProgressEvent(**data).step for kind, data in events if kind == "progress"]
        assert len(previews) >= 3, [kind for kind, _ in events]
        preview_steps = [data["step"] for _, data in previews]
        assert preview_steps == sorted(set(preview_steps)) and preview_steps[-1] <= 24
        assert preview_steps[0] < 24  # during the job, not only at its end
        for _, data in previews:
            image = preview_image(data)
            assert image.format == "WEBP"
            assert_aspect(image, width, height)
        # Progress still arrives in order, and the stream still ends with the finished record.
        assert steps == sorted(set(steps)) and steps[-1] == 24
        assert events[-1][0] == "status" and events[-1][1]["status"] == "completed"
        assert previews[-1][0] < len(events) - 1


def test_the_preview_route_answers_the_latest_while_running_and_after(preview_engine):
    url = preview_engine.base_url
    job = create(url, **{**WIDE, "num_inference_steps": "120"})
    route = f"{url}/v1/videos/{job['id']}/preview"

    def a_preview_while_running() -> httpx.Response | None:
        answer = httpx.get(route, timeout=10)
        assert answer.status_code in (200, 204), answer.text
        running = answer.status_code == 200 and int(answer.headers[PREVIEW_STEP_HEADER]) < 120
        return answer if running else None

    running = wait_for(a_preview_while_running, "a preview before the last step", 60, poll_s=0.02)
    assert running is not None, "no preview while the job ran"
    assert running.headers["content-type"] == "image/webp"
    assert running.headers[PREVIEW_TOTAL_STEPS_HEADER] == "120"
    assert_aspect(Image.open(io.BytesIO(running.content)), 512, 288)
    # A client that connects now gets the latest progress, then the latest preview, first.
    with httpx.stream("GET", f"{url}/v1/videos/{job['id']}/events", timeout=STREAM_TIMEOUT) as response:
        events = list(events_of(response))
    assert [kind for kind, _ in events[:2]] == ["progress", "preview"]
    assert events[1][1]["step"] >= int(running.headers[PREVIEW_STEP_HEADER])
    # After the job: the last step's preview; a client that has it already is told so (304).
    done = httpx.get(route, timeout=10)
    assert done.status_code == 200 and done.headers[PREVIEW_STEP_HEADER] == "120"
    assert Image.open(io.BytesIO(done.content)).format == "WEBP"
    again = httpx.get(route, headers={"If-None-Match": done.headers["etag"]}, timeout=10)
    assert again.status_code == 304 and again.content == b""
    unknown = httpx.get(f"{url}/v1/videos/video_gen_nope/preview", timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == 404


def test_a_request_can_turn_its_previews_off(preview_engine):
    job = create(preview_engine.base_url, **WIDE, extra_params=json.dumps({"previews": False}))
    events = read_events(preview_engine.base_url, job["id"])
    assert [kind for kind, _ in events if kind == "preview"] == []
    assert events[-1][1]["status"] == "completed" and any(kind == "progress" for kind, _ in events)
    assert httpx.get(f"{preview_engine.base_url}/v1/videos/{job['id']}/preview", timeout=10).status_code == 204


def test_the_preview_route_takes_the_api_key(keyed_engine):
    key = {"Authorization": f"Bearer {API_KEY}"}
    job = create(keyed_engine.base_url, headers=key)
    wrong = {"Authorization": "Bearer not-the-key"}
    for route in ("preview", "events"):
        assert httpx.get(f"{keyed_engine.base_url}/v1/videos/{job['id']}/{route}", timeout=10).status_code == 401
        refused = httpx.get(f"{keyed_engine.base_url}/v1/videos/{job['id']}/{route}", headers=wrong, timeout=10)
        assert refused.status_code == 401
    assert read_events(keyed_engine.base_url, job["id"], headers=key)[-1][1]["status"] == "completed"
    preview = httpx.get(f"{keyed_engine.base_url}/v1/videos/{job['id']}/preview", headers=key, timeout=10)
    assert preview.status_code == 200 and preview.headers[PREVIEW_STEP_HEADER] == "2"


def test_the_tiny_wan_engine_previews_through_the_wan_path(wan_engine):
    job = create(wan_engine.base_url, size="128x72", num_frames="9", num_inference_steps="4", guidance_scale="5")
    events = read_events(wan_engine.base_url, job["id"])
    previews = [data for kind, data in events if kind == "preview"]
    assert previews and previews[-1]["step"] == 4
    for data in previews:
        assert_aspect(preview_image(data), 128, 72)
    assert events[-1][1]["status"] == "completed"


def test_a_server_started_without_previews_makes_none(tmp_path):
    server = start_engine(tmp_path, engine_previews=False)
    try:
        job = create(server.base_url, extra_params=json.dumps({"previews": True}))
        events = read_events(server.base_url, job["id"])
        assert "preview" not in [kind for kind, _ in events] and events[-1][1]["status"] == "completed"
        assert httpx.get(f"{server.base_url}/v1/videos/{job['id']}/preview", timeout=10).status_code == 204
    finally:
        server.stop()
