"""The embedded engine against a hostile client, over HTTP to the real `python -m studio.engine` process: extra_params
carries only the keys the engine takes, within their bounds, and look-alike characters do not get a blocked prompt
past the guardrail."""

from __future__ import annotations

import httpx
import pytest

from studio.media import probe_mp4
from studio.protocol import MAX_REQUEST_FRAMES, MAX_STEPS, EngineExtraParams
from tests.conftest import SMALL
from tests.conftest import multipart as form
from tests.waiting import wait_for


def finished(http: httpx.Client, job_id: str) -> dict:
    def record() -> dict | None:
        body = http.get(f"/v1/videos/{job_id}").json()
        return body if body["status"] in ("completed", "failed") else None

    return wait_for(record, f"job {job_id} to finish", timeout_s=120, poll_s=0.05)


def assert_refused(response: httpx.Response, key: str) -> str:
    """A 400 in vLLM's error envelope (no job made) that names the key; returns the message."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"], error["param"]) == (400, "Bad Request", f"body.extra_params.{key}")
    assert f"extra_params.{key}" in error["message"]
    return error["message"]


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        # Past the form's limits: 1025 frames, 200 steps.
        ({"size": "32x32", "extra_params": '{"num_frames": 1500}'}, "num_frames", "the num_frames form field"),
        (
            {**SMALL, "extra_params": '{"num_inference_steps": 300}'},
            "num_inference_steps",
            "the num_inference_steps form field",
        ),
        # Past the guardrail, which checks the prompt form field.
        ({**SMALL, "extra_params": '{"prompt": "gore"}'}, "prompt", "the prompt form field"),
        ({**SMALL, "extra_params": '{"guidance_scale": 1000}'}, "guidance_scale", "the guidance_scale form field"),
        ({**SMALL, "extra_params": '{"height": 100000}'}, "height", "the height form field"),
        # The pipeline's own arguments, which failed the job with raw Python errors.
        ({**SMALL, "extra_params": '{"return_dict": false}'}, "return_dict", "is not a key"),
        ({**SMALL, "extra_params": '{"latents": "x"}'}, "latents", "is not a key"),
        ({**SMALL, "extra_params": '{"generator": 1}'}, "generator", "is not a key"),
        (
            {**SMALL, "extra_params": '{"guardrails": false, "num_videos_per_prompt": 64}'},
            "num_videos_per_prompt",
            "is not a key",
        ),
        # A key the engine takes, out of its bounds.
        ({**SMALL, "extra_params": '{"max_sequence_length": 100000000}'}, "max_sequence_length", "less than"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/videos", "/v1/videos/sync"])
def test_extra_params_takes_no_form_field_and_no_unknown_key(http, route, fields, key, words):
    prompt = f"refused for its extra_params.{key}"
    message = assert_refused(http.post(route, files=form(prompt=prompt, **fields)), key)
    assert words in message
    if words == "is not a key":
        assert all(name in message for name in EngineExtraParams.model_fields)  # says what it does take
    listed = http.get("/v1/videos", params={"limit": 100}).json()["data"]
    assert prompt not in [job["prompt"] for job in listed]  # refused before any job was made


def test_the_form_still_makes_what_its_limits_allow_and_refuses_more(http):
    too_many = http.post("/v1/videos", files=form(prompt="x", size="32x32", num_frames=str(MAX_REQUEST_FRAMES + 475)))
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "body.num_frames"
    too_long = http.post("/v1/videos", files=form(prompt="x", size="32x32", num_inference_steps=str(MAX_STEPS + 100)))
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "body.num_inference_steps"


def test_the_keys_the_engine_takes_still_make_a_video(http, tmp_path):
    # The studio turns the guardrail off per request with extra_params.guardrails, as Cosmos 3 takes it.
    unguarded = http.post("/v1/videos/sync", files=form(prompt="gore", extra_params='{"guardrails": false}', **SMALL))
    assert unguarded.status_code == 200 and unguarded.headers["content-type"] == "video/mp4"
    # Pipeline keys the engine takes go to a pipeline that has them; the small model has none and ignores them.
    extra = '{"max_sequence_length": 64, "use_resolution_template": true, "use_duration_template": false}'
    created = http.post("/v1/videos", files=form(prompt="a red circle", extra_params=extra, **SMALL))
    assert created.status_code == 200, created.text
    done = finished(http, created.json()["id"])
    assert done["status"] == "completed", done["error"]
    content = http.get(f"/v1/videos/{done['id']}/content")
    (tmp_path / "v.mp4").write_bytes(content.content)
    assert probe_mp4(tmp_path / "v.mp4").num_frames == 5


# ---- the guardrail against look-alike characters ----------------------------------------------------------
@pytest.mark.parametrize(
    "prompt",
    [
        "go\u00adre",  # soft hyphen
        "go\u200bre",  # zero-width space
        "g\u043ere",  # Cyrillic о
        "a scene full of G\u039fR\u0415",  # Greek capital Omicron, Cyrillic capital Е
        "\uff47\uff4f\uff52\uff45",  # fullwidth
    ],
    ids=["soft-hyphen", "zero-width-space", "cyrillic-o", "greek-and-cyrillic-capitals", "fullwidth"],
)
@pytest.mark.parametrize("route", ["/v1/videos", "/v1/videos/sync"])
def test_look_alike_characters_do_not_get_a_blocked_prompt_past_the_guardrail(http, route, prompt):
    response = http.post(route, files=form(prompt=prompt, **SMALL))
    assert response.status_code == 400, response.text
    body = response.json()  # async: the failed job; sync: the error envelope
    if route == "/v1/videos":
        assert body["status"] == "failed" and body["error"]["code"] == 400
    message = body["error"]["message"]
    assert "blocked" in message and "guardrail" in message and "'gore'" in message


def test_ordinary_prompts_still_pass_the_guardrail(http):
    for prompt in ("a gorgeous red circle", "bu resme göre bir kare", "cr\u00e8me br\u00fbl\u00e9e, caf\u00e9"):
        response = http.post("/v1/videos/sync", files=form(prompt=prompt, **SMALL))
        assert response.status_code == 200, (prompt, response.text)
