"""The embedded engine where peer clients found it apart from vLLM-Omni's contract: `quality`, `lora`,
`return_stage_metrics`, the length fields of a record while its job runs, an empty body, and the clock of its
figures."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests import waiting
from tests.conftest import SMALL
from tests.conftest import multipart as form


def follow(http: httpx.Client, job_id: str, timeout_s: float = 120.0) -> list[dict]:
    """Every record GET answered for the job, polled closely, until it finished."""
    seen: list[dict] = []

    def finished() -> dict | None:
        seen.append(http.get(f"/v1/videos/{job_id}").json())
        return seen[-1] if seen[-1]["status"] in ("completed", "failed") else None

    waiting.wait_for(finished, f"job {job_id} to finish", timeout_s, poll_s=0.01, detail=lambda: f"{seen[-1:]}")
    return seen


# ---- quality ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("quality", ["ultra", "default", "HIGH", "low"])
def test_a_quality_vllm_omni_does_not_take_is_a_400_naming_the_field(http, quality):
    response = http.post("/v1/videos", files=form(prompt="q", quality=quality, **SMALL))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "body.quality" and error["code"] == 400
    assert "quality must be one of ['lossless', 'high']" in error["message"] and repr(quality) in error["message"]


@pytest.mark.parametrize("quality", ["lossless", "high"])  # vLLM-Omni's DIFFUSION_QUALITY_LEVELS
def test_the_quality_sent_is_recorded(http, quality):
    record = http.post("/v1/videos", files=form(prompt="q", quality=quality, **SMALL)).json()
    assert record["quality"] == quality
    records = follow(http, record["id"])
    assert records[-1]["status"] == "completed"
    assert {seen["quality"] for seen in records} == {quality}


def test_quality_not_sent_is_default(http):
    record = http.post("/v1/videos", files=form(prompt="q", **SMALL)).json()
    assert record["quality"] == "default"
    assert follow(http, record["id"])[-1]["quality"] == "default"


# ---- lora ---------------------------------------------------------------------------------------------------
def test_a_lora_adapter_fails_the_job_with_400_as_the_engine_serves_none(http):
    lora = '{"name": "film-grain", "path": "/adapters/film-grain", "scale": 0.8}'
    response = http.post("/v1/videos", files=form(prompt="a lora job", lora=lora, **SMALL))
    assert response.status_code == 400
    record = response.json()
    assert record["status"] == "failed" and record["error"]["code"] == 400
    assert "serves no LoRA adapters" in record["error"]["message"] and "film-grain" in record["error"]["message"]
    again = http.get(f"/v1/videos/{record['id']}")
    assert again.status_code == 400 and again.json()["error"] == record["error"]
    assert http.get(f"/v1/videos/{record['id']}/content").status_code == 422
    sync = http.post("/v1/videos/sync", files=form(prompt="a lora job", lora=lora, **SMALL))
    assert sync.status_code == 400 and "serves no LoRA adapters" in sync.json()["error"]["message"]


@pytest.mark.parametrize("lora", ['{"scale": 1.0}', '{"name": "style"}', '{"lora_path": "/a"}'])
def test_a_lora_object_without_name_and_path_fails_the_job_as_on_vllm_omni(http, lora):
    response = http.post("/v1/videos", files=form(prompt="x", lora=lora, **SMALL))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == 400 and error["message"] == "Invalid lora object: both name and path are required."


def test_lora_names_its_adapter_under_any_of_vllm_omnis_keys(http):
    lora = '{"lora_name": "style", "lora_local_path": "/a"}'
    response = http.post("/v1/videos", files=form(prompt="x", lora=lora, **SMALL))
    assert response.status_code == 400 and "'style'" in response.json()["error"]["message"]


@pytest.mark.parametrize(("lora", "words"), [("[1]", "expected dict, got list"), ("{bad", "not valid JSON")])
def test_a_lora_that_is_no_json_object_is_a_400(http, lora, words):
    response = http.post("/v1/videos", files=form(prompt="x", lora=lora, **SMALL))
    assert response.status_code == 400
    error = response.json()["error"]
    assert words in error["message"] and "lora" in error["message"] and error["param"] is None


# ---- return_stage_metrics -----------------------------------------------------------------------------------
def test_stage_metrics_fill_the_finished_record_where_asked(http):
    record = http.post("/v1/videos", files=form(prompt="m", return_stage_metrics="true", **SMALL)).json()
    assert record["metrics"] is None  # nothing measured yet
    done = follow(http, record["id"])[-1]
    assert done["status"] == "completed"
    metrics = done["metrics"]
    assert (metrics["stage_id"], metrics["final_output_type"]) == (0, "video")
    stage = metrics["stage_metrics"]["0"]
    assert stage["stage_id"] == 0 and stage["final_output_type"] == "video" and stage["output_unit_count"] == 1
    assert stage["stage_gen_time_ms"] == pytest.approx(done["inference_time_s"] * 1000, abs=0.01)
    assert stage["denoise_step_latency_ms"] > 0 and stage["postprocess_time_ms"] > 0
    for part in ("denoise", "decode", "encode"):
        assert stage[f"{part}_s"] == done["stage_durations"][part]
    assert stage["video_frames"] == done["num_frames"] == 5
    assert stage["e2e_latency_s"] >= done["inference_time_s"]


@pytest.mark.parametrize("asked", [None, "false"])
def test_no_stage_metrics_unless_asked(http, asked):
    fields = {} if asked is None else {"return_stage_metrics": asked}
    record = http.post("/v1/videos", files=form(prompt="m", **fields, **SMALL)).json()
    assert follow(http, record["id"])[-1]["metrics"] is None


# ---- the length fields while a job runs ---------------------------------------------------------------------
LENGTH_FIELDS = ("num_frames", "seconds", "duration_s")


def lengths(record: dict) -> tuple:
    return tuple(record[name] for name in LENGTH_FIELDS)


def test_a_length_not_sent_stays_null_until_the_video_says_it(http):
    # Neither num_frames nor seconds: 4 s at 4 fps asked of the model (16 frames, made as 17).
    record = http.post("/v1/videos", files=form(prompt="len", size="64x64", fps="4", num_inference_steps="2")).json()
    assert lengths(record) == (None, None, None) and record["fps"] == 4.0
    records = follow(http, record["id"])
    running = [seen for seen in records if seen["status"] != "completed"]
    assert running and all(lengths(seen) == (None, None, None) for seen in running)
    done = records[-1]
    assert done["status"] == "completed"
    # What was made, stated one way: 17 frames at 4 fps are 4.25 s, whole seconds rounded up.
    assert lengths(done) == (17, "5", 4.25)


def test_sent_lengths_never_change_while_the_job_runs(http):
    record = http.post(
        "/v1/videos", files=form(prompt="len", size="64x64", fps="4", seconds="1", num_inference_steps="2")
    ).json()
    assert lengths(record) == (4, "1", 1.0)
    records = follow(http, record["id"])
    assert all(lengths(seen) == (4, "1", 1.0) for seen in records if seen["status"] != "completed")
    # Made as 5 frames (4k+1): the count and duration are the video's, seconds stays as sent.
    assert lengths(records[-1]) == (5, "1", 1.25)


def test_sent_frames_are_kept_until_the_video_counts_them(http):
    record = http.post("/v1/videos", files=form(prompt="len", size="64x64", num_frames="6", fps="16")).json()
    assert lengths(record) == (6, None, 0.375)
    records = follow(http, record["id"])
    assert all(lengths(seen) == (6, None, 0.375) for seen in records if seen["status"] != "completed")
    assert lengths(records[-1]) == (9, "1", 0.5625)


# ---- an empty body ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "send",
    [
        lambda http: http.post("/v1/videos"),
        lambda http: http.post("/v1/videos", headers={"Content-Type": "multipart/form-data; boundary=x"}),
        lambda http: http.post("/v1/videos", content=b"", headers={"Content-Type": "application/json"}),
        lambda http: http.post("/v1/videos/sync"),
    ],
    ids=["no body", "empty multipart", "empty json", "sync"],
)
def test_an_empty_body_is_told_the_prompt_is_missing(http, send):
    response = send(http)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "body.prompt" and error["message"] == "prompt is required"


def test_a_json_body_is_still_told_to_send_a_form(http):
    response = http.post("/v1/videos", json={"prompt": "x"})
    assert response.status_code == 400 and "multipart/form-data" in response.json()["error"]["message"]


# ---- the clock of the figures -------------------------------------------------------------------------------
E2E_SUM = re.compile(r"^vllm_omni:e2e_request_latency_s_sum\{[^}]*\} (\S+)$", re.MULTILINE)


def e2e_sum(http: httpx.Client) -> float:
    return float(E2E_SUM.search(http.get("/metrics").text).group(1))


def past_the_half_second() -> None:
    """Wait until the wall clock is a little past a whole second's half: a latency measured from the whole-second
    created_at would then read about half a second high."""
    time.sleep((0.45 - time.time() % 1) % 1)


def test_latency_is_measured_on_a_monotonic_clock_not_from_the_whole_second(http):
    before = e2e_sum(http)
    past_the_half_second()
    sent = time.monotonic()
    response = http.post("/v1/videos/sync", files=form(prompt="clock", **SMALL))
    answered = time.monotonic()
    assert response.status_code == 200
    # The engine's measure lies inside the client's: the same monotonic clock, a nested interval.
    e2e_s = e2e_sum(http) - before
    assert 0 < e2e_s <= answered - sent
    assert float(response.headers["x-inference-time-s"]) <= e2e_s


def test_a_records_latency_lies_within_the_clients_view(http):
    past_the_half_second()
    sent = time.monotonic()
    record = http.post("/v1/videos", files=form(prompt="clock", return_stage_metrics="true", **SMALL)).json()
    done = follow(http, record["id"])[-1]
    seen = time.monotonic()
    stage = done["metrics"]["stage_metrics"]["0"]
    assert done["inference_time_s"] <= stage["e2e_latency_s"] <= seen - sent
    assert isinstance(done["created_at"], int) and isinstance(done["completed_at"], int)
