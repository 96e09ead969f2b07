"""The studio as a gateway for programs: the openai SDK's videos API against a real studio on its embedded engine,
two accounts each with an API key. Each key sees only its own videos, a wrong key is 401, a quota 429 with
Retry-After, a bad field 400 naming it, and a video made through the API is in its user's History on the page."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator

import httpx
import openai
import pytest
from gradio_client import Client
from PIL import Image

from studio.gateway.keys import add_key
from tests.studio_process import RunningStudio, start_studio, stop_studio
from tests.waiting import wait_for

ACCOUNTS = {"alice": "alice-pass", "bob": "bob-pass"}
VIDEOS_PER_HOUR = 3
QUICK = {"num_frames": 5, "num_inference_steps": 2, "seed": 7}
SLOW = {"num_frames": 5, "num_inference_steps": 200, "seed": 7}
SIZE = "256x256"  # the 256p tier at 1:1
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[tuple[RunningStudio, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("gateway")
    key_file = folder / "keys.txt"
    keys = {user: add_key(key_file, user) for user in ACCOUNTS}
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(
        folder / "outputs",
        folder / "studio.log",
        *accounts,
        "--api-key-file",
        str(key_file),
        "--visitor-max-videos-per-hour",
        str(VIDEOS_PER_HOUR),
    )
    yield running, keys
    stop_studio(running)


def sdk(studio: RunningStudio, key: str) -> openai.OpenAI:
    # No retries: a 429 is what the test reads, not what the SDK waits out.
    return openai.OpenAI(base_url=f"{studio.url}/v1", api_key=key, max_retries=0, timeout=60)


def owner(studio: RunningStudio, video_id: str) -> str | None:
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        row = db.execute(
            "SELECT r.visitor FROM requests q JOIN runs r ON r.id = q.run_id WHERE q.id = ?", (video_id,)
        ).fetchone()
    return row[0] if row else None


def test_a_program_makes_a_video_and_it_is_its_users_alone(studio):
    running, keys = studio
    alice, bob = sdk(running, keys["alice"]), sdk(running, keys["bob"])
    assert [model.id for model in alice.models.list()]

    video = alice.videos.create_and_poll(
        prompt="a red circle gw-alice-1", size=SIZE, extra_body=QUICK, poll_interval_ms=300, timeout=RUN_TIMEOUT_S
    )
    assert video.status == "completed", video
    assert video.id.startswith("req_") and video.size == SIZE and video.progress == 100
    content = alice.videos.download_content(video.id).content
    assert content[4:8] == b"ftyp"
    assert alice.videos.retrieve(video.id).status == "completed"
    assert video.id in [item.id for item in alice.videos.list(limit=10)]

    # Another key's video is not found, in the words of one that never was; their list holds their own alone.
    with pytest.raises(openai.NotFoundError):
        bob.videos.retrieve(video.id)
    with pytest.raises(openai.NotFoundError):
        bob.videos.retrieve("req_000000000000")
    with pytest.raises(openai.NotFoundError):
        bob.videos.download_content(video.id)
    with pytest.raises(openai.NotFoundError):
        bob.videos.delete(video.id)
    assert video.id not in [item.id for item in bob.videos.list()]

    # A finished video stays in History: DELETE says so.
    assert alice.videos.delete(video.id).deleted is False

    # The request is the studio's own: alice's in history, and on her History tab in the page.
    assert owner(running, video.id) == "user:alice"
    page = Client(running.url, auth=("alice", ACCOUNTS["alice"]), verbose=False)
    assert "gw-alice-1" in str(page.predict(show="mine", api_name="/history"))


def test_a_wrong_key_is_refused_and_a_bad_field_is_named(studio):
    running, keys = studio
    with pytest.raises(openai.AuthenticationError):
        sdk(running, "oms-not-a-key-of-this-studio").videos.list()
    response = httpx.get(f"{running.url}/v1/videos", timeout=30)
    assert response.status_code == 401 and "Authorization: Bearer" in response.json()["error"]["message"]

    alice = sdk(running, keys["alice"])
    with pytest.raises(openai.BadRequestError) as bad:
        alice.videos.create(prompt="a red circle", size=SIZE, extra_body={**QUICK, "num_inference_steps": 500})
    assert bad.value.status_code == 400 and "num_inference_steps" in str(bad.value)
    with pytest.raises(openai.BadRequestError) as bad:
        alice.videos.create(prompt="a red circle", size="123x45", extra_body=QUICK)
    assert "size" in str(bad.value) and "256x256" in str(bad.value)
    image = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(image, format="PNG")
    with pytest.raises(openai.BadRequestError) as bad:  # the embedded engine's models are text-to-video
        alice.videos.create(prompt="a red circle", input_reference=("red.png", image.getvalue(), "image/png"))
    assert "input_reference" in str(bad.value.body) and "text-to-video" in str(bad.value)
    log = running.log.read_text(errors="replace")
    assert "a wrong API key from" in log and not any(key in log for key in keys.values())


def test_sync_answers_the_mp4_and_delete_cancels(studio):
    running, keys = studio
    headers = {"Authorization": f"Bearer {keys['alice']}"}
    form = {"prompt": "a blue square gw-sync", "size": SIZE, **{name: str(value) for name, value in QUICK.items()}}
    response = httpx.post(f"{running.url}/v1/videos/sync", data=form, headers=headers, timeout=RUN_TIMEOUT_S)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "video/mp4" and response.content[4:8] == b"ftyp"
    assert response.headers["x-request-id"].startswith("req_") and "x-inference-time-s" in response.headers

    alice = sdk(running, keys["alice"])
    slow = alice.videos.create(prompt="a green triangle gw-cancel", size=SIZE, extra_body=SLOW)
    assert alice.videos.delete(slow.id).deleted is True
    record = alice.videos.retrieve(slow.id)
    assert record.status == "failed" and record.error is not None and record.error.code == "cancelled"

    # The SDK follows the pages (after = the last id of each), newest first or oldest first.
    newest_first = [video.id for video in alice.videos.list(limit=1)]
    assert newest_first[0] == slow.id and len(set(newest_first)) == len(newest_first) >= 3
    assert [video.id for video in alice.videos.list(limit=2, order="asc")] == newest_first[::-1]


def test_a_visitor_over_their_hourly_videos_is_told_when_to_come_back(studio):
    running, keys = studio
    bob = sdk(running, keys["bob"])
    made = [bob.videos.create(prompt=f"a red circle gw-bob-{n}", size=SIZE, extra_body=SLOW) for n in range(3)]
    try:
        with pytest.raises(openai.RateLimitError) as limited:
            bob.videos.create(prompt="a red circle gw-bob-over", size=SIZE, extra_body=QUICK)
        assert f"at most {VIDEOS_PER_HOUR} videos per hour" in str(limited.value)
        assert 0 < int(limited.value.response.headers["retry-after"]) <= 3600
    finally:
        for video in made:
            bob.videos.delete(video.id)
    wait_for(
        lambda: all(bob.videos.retrieve(video.id).status == "failed" for video in made), "bob's cancels", RUN_TIMEOUT_S
    )


def test_a_studio_without_sign_in_answers_programs_on_its_own_machine(tmp_path):
    running = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        models = httpx.get(f"{running.url}/v1/models", timeout=30)
        assert models.status_code == 200 and models.json()["data"][0]["object"] == "model"
        forged = httpx.post(
            f"{running.url}/v1/videos", data={"prompt": "x"}, headers={"Origin": "http://elsewhere.example"}, timeout=30
        )
        assert forged.status_code == 403
        assert httpx.get(running.url, timeout=30).status_code == 200  # the page's own routes as before
    finally:
        stop_studio(running)
