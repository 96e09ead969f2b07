"""The embedded engine over HTTP: every endpoint, and bad requests with vLLM-Omni's status codes."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from studio.media import probe_mp4
from studio.protocol import JobRecord, JobStatus
from tests import waiting
from tests.conftest import API_KEY, MODEL_NAME, SMALL
from tests.conftest import multipart as form

LONG_JOB = {"prompt": "a long job", "size": "320x192", "num_frames": "33", "num_inference_steps": "200"}


def wait_for(http: httpx.Client, job_id: str, predicate, timeout_s: float = 120.0) -> dict:
    last: list[dict] = []

    def reached() -> dict | None:
        last[:] = [http.get(f"/v1/videos/{job_id}").json()]
        return last[0] if predicate(last[0]) else None

    return waiting.wait_for(
        reached, f"job {job_id} to reach the expected state", timeout_s, poll_s=0.05, detail=lambda: f"last: {last[0]}"
    )


def test_health_and_models(http):
    assert http.get("/health").json() == {"status": "healthy"}
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == MODEL_NAME and models["data"][0]["object"] == "model"


def test_async_job_life_cycle(http, tmp_path):
    created = http.post(
        "/v1/videos",
        files=form(prompt="a red circle", size="320x192", num_frames="6", num_inference_steps="3", seed="3", fps="16"),
    )
    assert created.status_code == 200
    record = created.json()
    assert record["id"].startswith("video_gen_") and record["object"] == "video"
    assert record["status"] == "queued" and record["size"] == "320x192" and record["model"] == MODEL_NAME
    # seconds was not sent: null until the video is made, then its length in whole seconds, rounded up
    assert record["num_frames"] == 6 and record["fps"] == 16.0 and record["seconds"] is None
    done = wait_for(http, record["id"], lambda r: r["status"] in ("completed", "failed"))
    assert done["status"] == "completed" and done["progress"] == 100 and done["num_frames"] == 9
    assert done["seconds"] == "1"  # 9 frames at 16 fps
    assert done["file_name"] == f"{record['id']}.mp4"
    assert done["inference_time_s"] > 0 and done["completed_at"] >= done["created_at"]
    content = http.get(f"/v1/videos/{record['id']}/content")
    assert content.status_code == 200 and content.headers["content-type"] == "video/mp4"
    path = tmp_path / "out.mp4"
    path.write_bytes(content.content)
    info = probe_mp4(path)
    # 6 frames are rounded up to 4k+1 = 9, as the pipeline does.
    assert (info.width, info.height, info.num_frames, info.codec, info.pix_fmt) == (
        320,
        192,
        9,
        "h264",
        "yuv420p",
    )
    listed = http.get("/v1/videos", params={"limit": 100}).json()
    assert listed["object"] == "list" and record["id"] in [job["id"] for job in listed["data"]]
    deleted = http.delete(f"/v1/videos/{record['id']}")
    assert deleted.json() == {"id": record["id"], "deleted": True, "object": "video.deleted"}
    assert http.get(f"/v1/videos/{record['id']}").status_code == 404


def test_record_has_the_contracts_fields_and_unknown_or_empty_form_fields_are_not_sent(http):
    created = http.post("/v1/videos", files=form(prompt="fields", negative_prompt="", fps="", unknown="x", **SMALL))
    assert created.status_code == 200
    record = created.json()
    # native_size and levers, the engine's own fields, appear only once a model made another size or a speed lever
    # changed how the job was made.
    assert set(record) == set(JobRecord.model_fields) - {"native_size", "levers"}
    assert JobRecord.model_validate(record).status is JobStatus.QUEUED and record["fps"] == 24.0
    done = wait_for(http, record["id"], lambda r: r["status"] in ("completed", "failed"))
    assert done["status"] == "completed" and set(done) <= set(JobRecord.model_fields)


def test_sync_returns_mp4_with_headers(http, tmp_path):
    response = http.post("/v1/videos/sync", files=form(prompt="a blue square", **SMALL))
    assert response.status_code == 200 and response.headers["content-type"] == "video/mp4"
    assert response.headers["x-request-id"].startswith("video_sync")
    assert response.headers["x-model"] == MODEL_NAME
    assert float(response.headers["x-inference-time-s"]) > 0
    assert "denoise" in json.loads(response.headers["x-stage-durations"])
    (tmp_path / "sync.mp4").write_bytes(response.content)
    assert probe_mp4(tmp_path / "sync.mp4").num_frames == 5


def test_list_paginates(http):
    ids = [http.post("/v1/videos", files=form(prompt=f"p{i}", **SMALL)).json()["id"] for i in range(3)]
    page = http.get("/v1/videos", params={"limit": 2, "order": "asc", "after": ids[0]}).json()
    assert [job["id"] for job in page["data"]] == ids[1:3]
    assert page["first_id"] == ids[1] and page["last_id"] == ids[2]


def test_running_job_content_is_404_and_delete_stops_it(http):
    job = http.post("/v1/videos", files=form(**LONG_JOB)).json()
    running = wait_for(http, job["id"], lambda r: r["status"] == "in_progress" and r["progress"] > 0)
    assert 0 < running["progress"] < 100  # real per-step progress
    content = http.get(f"/v1/videos/{job['id']}/content")
    assert content.status_code == 404 and "in-progress" in content.json()["error"]["message"]
    started = time.monotonic()
    assert http.delete(f"/v1/videos/{job['id']}").json()["deleted"] is True
    assert time.monotonic() - started < 2.0  # stopped at its next step, not at the end of 200
    metrics = http.get("/metrics").text
    assert f'vllm_omni:num_requests_running{{model_name="{MODEL_NAME}"}} 0.0' in metrics


def test_jobs_queue_fifo_and_stay_queued_until_started(http):
    first = http.post("/v1/videos", files=form(**LONG_JOB)).json()
    second = http.post("/v1/videos", files=form(prompt="second", **SMALL)).json()
    wait_for(http, first["id"], lambda r: r["status"] == "in_progress")
    assert http.get(f"/v1/videos/{second['id']}").json()["status"] == "queued"
    metrics = http.get("/metrics").text
    assert f'vllm_omni:num_requests_waiting{{model_name="{MODEL_NAME}"}} 1.0' in metrics
    http.delete(f"/v1/videos/{first['id']}")
    done = wait_for(http, second["id"], lambda r: r["status"] == "completed")
    assert done["progress"] == 100


def test_metrics_names(http):
    http.post("/v1/videos/sync", files=form(prompt="metrics", **SMALL))
    text = http.get("/metrics").text
    for name in (
        "vllm_omni:num_requests_running",
        "vllm_omni:num_requests_waiting",
        "vllm_omni:requests_success_total",
        "vllm_omni:e2e_request_latency_s_bucket",
        "vllm_omni:diffusion_exec_s_count",
        "vllm_omni:diffusion_exec_per_step_s_sum",
    ):
        assert name in text


BAD_REQUESTS = [
    ("missing prompt", {"size": "64x64"}, 400, "prompt"),
    ("whitespace prompt", {"prompt": "   "}, 400, "prompt"),
    ("size 640x", {"prompt": "x", "size": "640x"}, 400, "size"),
    ("size abc", {"prompt": "x", "size": "abc"}, 400, "size"),
    ("steps 0", {"prompt": "x", "num_inference_steps": "0"}, 400, "num_inference_steps"),
    ("steps 201", {"prompt": "x", "num_inference_steps": "201"}, 400, "num_inference_steps"),
    ("guidance 21", {"prompt": "x", "guidance_scale": "21"}, 400, "guidance_scale"),
    ("guidance -1", {"prompt": "x", "guidance_scale": "-1"}, 400, "guidance_scale"),
    ("extra_params array", {"prompt": "x", "extra_params": "[1]"}, 400, "expected dict, got list"),
    ("extra_params bad json", {"prompt": "x", "extra_params": "{bad"}, 400, "Invalid JSON in form field"),
    ("model mismatch", {"prompt": "x", "model": "other-model"}, 400, "Model mismatch"),
    ("seconds 0", {"prompt": "x", "seconds": "0"}, 400, "seconds"),
    ("frames not a number", {"prompt": "x", "num_frames": "many"}, 400, "num_frames"),
    ("seed too large", {"prompt": "x", "seed": str(2**70)}, 400, "seed"),
    ("file_id reference", {"prompt": "x", "file_id": "file_1"}, 400, "file_id"),
]


@pytest.mark.parametrize(
    ("fields", "status", "words"), [case[1:] for case in BAD_REQUESTS], ids=[case[0] for case in BAD_REQUESTS]
)
def test_bad_requests_get_clear_errors(http, fields, status, words):
    response = http.post("/v1/videos", files=form(**fields))
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == status and words in error["message"]


def test_json_body_is_rejected(http):
    response = http.post("/v1/videos", json={"prompt": "x"})
    assert response.status_code == 400 and "multipart/form-data" in response.json()["error"]["message"]


def test_unknown_job_ids(http):
    for method, path in (
        ("GET", "/v1/videos/video_gen_nope"),
        ("GET", "/v1/videos/video_gen_nope/content"),
        ("DELETE", "/v1/videos/video_gen_nope"),
    ):
        response = http.request(method, path)
        assert response.status_code == 404 and response.json()["error"]["message"] == "Video not found"


def test_blocked_prompt_is_a_failed_job_with_400(http):
    response = http.post("/v1/videos", files=form(prompt="a scene full of gore", **{"size": "64x64"}))
    assert response.status_code == 400
    record = response.json()
    assert record["status"] == "failed" and record["error"]["code"] == 400
    assert "blocked" in record["error"]["message"] and "guardrail" in record["error"]["message"]
    again = http.get(f"/v1/videos/{record['id']}")
    assert again.status_code == 400 and again.json()["status"] == "failed"
    assert http.get(f"/v1/videos/{record['id']}/content").status_code == 422
    sync = http.post("/v1/videos/sync", files=form(prompt="gore", **SMALL))
    assert sync.status_code == 400 and "guardrail" in sync.json()["error"]["message"]


def test_guardrails_off_per_request(http):
    response = http.post("/v1/videos/sync", files=form(prompt="gore", extra_params='{"guardrails": false}', **SMALL))
    assert response.status_code == 200 and response.headers["content-type"] == "video/mp4"


def test_api_key_required_on_v1_only(keyed_engine):
    with httpx.Client(base_url=keyed_engine.base_url, timeout=30) as http:
        assert http.get("/health").status_code == 200
        assert http.get("/v1/models").status_code == 401
        assert http.post("/v1/videos", files=form(prompt="x", **SMALL)).status_code == 401
        wrong = http.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = http.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code == 200
    assert API_KEY not in " ".join(keyed_engine.status().command.split())
    assert all(API_KEY not in line for line in keyed_engine.log_tail(400))
