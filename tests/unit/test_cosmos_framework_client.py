"""The Cosmos Framework client's mapping of a studio request to the server's body, and of the server's answers
(each status the contract lists) to the studio's job model. No server: the answers are built as the contract
page gives them (docs: cosmos-framework-serve-api)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from studio.backend.clients.base import ClientError, RequestRejected, ServerClient, save_stream
from studio.backend.clients.cosmos_framework import (
    GUARDRAILS_AT_START,
    JOB_ID_PREFIX,
    LATENCY_ONLY,
    NO_CANCEL,
    NO_FOLLOW_UP,
    NO_UPLOAD,
    CosmosFrameworkClient,
    generate_body,
    server_base,
)
from studio.backend.clients.router import EndpointPool
from studio.backend.clients.vllm_omni import VideoClient
from studio.backend.engine_kinds import client_class_for
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.protocol import JobRecord, JobStatus, VideoRequest, is_guardrail_block
from studio.ui import tables


def request(**values) -> VideoRequest:
    spec = RunSpec(prompts=["a red circle"], tier="480p", aspect="16:9", frames=33, steps=12, guidance=5.0, seed=7)
    return spec.model_copy(update=values).build_requests()[0]


def answer(status: int, body: object) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return httpx.Response(status, content=content)


def queued() -> JobRecord:
    return JobRecord(id=JOB_ID_PREFIX + "x", status=JobStatus.IN_PROGRESS)


CLIENT = CosmosFrameworkClient("http://gpu-node:8000")


def test_the_engine_gets_this_client_and_others_keep_the_video_api():
    assert client_class_for("cosmos-framework") is CosmosFrameworkClient
    assert client_class_for("remote") is VideoClient and client_class_for("vllm-omni") is VideoClient
    pool = EndpointPool.from_urls(["http://a:8000", "http://b:8000"], client_class=CosmosFrameworkClient)
    assert [type(ep.client) for ep in pool.endpoints] == [CosmosFrameworkClient, CosmosFrameworkClient]


@pytest.mark.parametrize("url", ["http://gpu-node:8000", "http://gpu-node:8000/", "http://gpu-node:8000/v1"])
def test_the_server_is_spoken_to_at_its_root(url):
    assert server_base(url) == "http://gpu-node:8000"


def test_tier_and_aspect_become_the_servers_strings_and_sampling_keeps_its_values():
    body = generate_body(request(negative_prompt="blur", fps=16), "req_1")
    assert body == {
        "name": "req_1",
        "prompt": "a red circle",
        "negative_prompt": "blur",
        "seed": 7,
        "resolution": "480",
        "aspect_ratio": "16,9",
        "fps": 16,
        "num_frames": 33,
        "num_steps": 12,
        "guidance": 5.0,
    }
    assert generate_body(request(tier="720p", aspect="9:16"), "n")["aspect_ratio"] == "9,16"
    assert generate_body(request(tier="256p", aspect="4:3"), "n")["resolution"] == "256"


def test_a_model_is_sent_by_name_and_left_out_for_the_servers_first():
    assert generate_body(request(model="Cosmos3-Nano"), "n")["model"] == "Cosmos3-Nano"
    assert "model" not in generate_body(request(), "n")


def test_an_image_goes_as_a_url_the_server_fetches_and_an_upload_is_refused(tmp_path):
    image = request().model_copy(update={"image_reference": json.dumps({"image_url": "https://x/cat.png"})})
    body = generate_body(image, "n")
    assert body["vision_path"] == "https://x/cat.png" and body["model_mode"] == "image2video"
    upload = tmp_path / "cat.png"
    upload.write_bytes(b"png")
    with pytest.raises(RequestRejected, match="takes no upload") as refused:
        generate_body(request(input_reference=upload), "n")
    assert str(refused.value) == NO_UPLOAD and "URL" in NO_UPLOAD


def test_the_image_url_of_a_run_is_the_vision_path_of_an_image_to_video_sample():
    spec = RunSpec(prompts=["a cat"], tier="256p", aspect="1:1", frames=9, image_url="https://img.example/cat.png")
    body = generate_body(spec.build_requests()[0], "n")
    assert (body["vision_path"], body["model_mode"]) == ("https://img.example/cat.png", "image2video")
    assert "vision_path" not in generate_body(request(), "n") and "model_mode" not in generate_body(request(), "n")


def test_both_clients_are_built_from_the_same_options_each_at_its_contracts_root():
    for kind, root in ((VideoClient, "http://gpu-node:8000/v1"), (CosmosFrameworkClient, "http://gpu-node:8000")):
        client = kind("http://gpu-node:8000/v1/", api_key="k", http_timeout_s=5.0, poll_interval_s=0.5, max_retries=0)
        assert isinstance(client, ServerClient) and client.base_url == root
        assert (client.api_key, client.http_timeout_s, client.poll_interval_s, client.max_retries) == ("k", 5.0, 0.5, 0)
        with pytest.raises(ValueError, match="must start with http"):
            kind("gpu-node:8000")


async def _chunks(broken: bool):
    yield b"ab"
    if broken:
        raise httpx.ReadError("connection reset")
    yield b"cd"


def test_a_video_is_saved_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "day" / "req.mp4"
    assert asyncio.run(save_stream(_chunks(broken=False), dest)) == 4 and dest.read_bytes() == b"abcd"
    broken = tmp_path / "day" / "broken.mp4"
    with pytest.raises(httpx.ReadError):
        asyncio.run(save_stream(_chunks(broken=True), broken))
    assert sorted(path.name for path in dest.parent.iterdir()) == ["req.mp4"]  # no part file, no half video


def test_guardrails_cannot_be_turned_off_per_request():
    assert "guardrails" not in generate_body(request(guardrails=True), "n")
    with pytest.raises(RequestRejected) as refused:
        generate_body(request(guardrails=False), "n")
    assert str(refused.value) == GUARDRAILS_AT_START and "--no-guardrails" in GUARDRAILS_AT_START


def test_a_key_the_server_would_refuse_is_named_before_sending():
    with pytest.raises(RequestRejected, match="takes no use_resolution_template"):
        generate_body(request(extra_params={"use_resolution_template": True}), "n")
    assert generate_body(request(extra_params={"shift": 5.0}), "n")["shift"] == 5.0


def test_a_size_outside_the_tier_table_is_refused_with_the_tiers():
    odd = VideoRequest(prompt="x", size="64x64", num_frames=5)
    with pytest.raises(RequestRejected, match="64x64 is no Cosmos 3 tier"):
        generate_body(odd, "n")


def test_success_is_a_completed_record_with_the_file_to_fetch():
    body = {
        "args": {"seed": 7},
        "status": "success",
        "message": "",
        "stack_trace": "",
        "outputs": [{"content": {}, "files": ["generate_20260821_101010_ab12/vision.mp4"]}],
    }
    record = CLIENT._answer_record(queued(), answer(200, body), 5.0)
    assert record.status is JobStatus.COMPLETED and record.file_name == "generate_20260821_101010_ab12/vision.mp4"
    assert record.inference_time_s is None  # the server gives no inference time: none is made up


def test_status_error_with_200_is_a_failed_job_with_the_servers_message():
    body = {"args": {}, "status": "error", "message": "Guardrail blocked text2video generation.", "outputs": []}
    record = CLIENT._answer_record(queued(), answer(200, body), 5.0)
    assert record.status is JobStatus.FAILED and record.error is not None
    assert "Guardrail blocked text2video generation." in record.error.message
    assert is_guardrail_block(record.error.message)  # the page marks the row as blocked


def test_a_500_with_a_text_body_is_a_failed_job_with_that_text():
    record = CLIENT._answer_record(queued(), answer(500, "Internal Server Error: CUDA out of memory"), 5.0)
    assert record.status is JobStatus.FAILED and record.error is not None and record.error.code == 500
    assert record.error.message == "Internal Server Error: CUDA out of memory"
    assert not is_guardrail_block(record.error.message)


def test_an_unknown_model_and_a_bad_field_are_rejections_that_say_which():
    detail = {"detail": "Model 'big' not found. Available models: ['']"}
    with pytest.raises(RequestRejected, match=r"no such model \(HTTP 404\): Model 'big' not found") as missing:
        CLIENT._answer_record(queued(), answer(404, detail), 5.0)
    assert missing.value.status_code == 404
    invalid = {"detail": [{"type": "less_than_equal", "loc": ["body", "guidance"], "msg": "Input should be <= 7"}]}
    with pytest.raises(RequestRejected, match=r"refused the request \(HTTP 422\): guidance: Input should be <= 7"):
        CLIENT._answer_record(queued(), answer(422, invalid), 5.0)


def test_success_without_an_mp4_and_a_body_that_is_no_answer_fail_clearly():
    empty = CLIENT._answer_record(queued(), answer(200, {"status": "success", "outputs": []}), 5.0)
    assert empty.status is JobStatus.FAILED and "sent no mp4" in empty.error.message
    with pytest.raises(ClientError, match="not a sample's outputs"):
        CLIENT._answer_record(queued(), answer(200, "<html>proxy</html>"), 5.0)


def test_a_request_of_an_earlier_studio_cannot_be_followed_and_says_why(tmp_path):
    with pytest.raises(ClientError, match="no job id") as lost:
        asyncio.run(CLIENT.follow(queued(), tmp_path / "x.mp4"))
    assert str(lost.value) == NO_FOLLOW_UP
    assert asyncio.run(CLIENT.cancel("anything")) is False


def test_the_requests_table_says_what_this_server_cannot_tell_or_do(tmp_path):
    pool = EndpointPool.from_urls(["http://gpu-node:8000"], client_class=CosmosFrameworkClient)
    store = OutputStore(tmp_path / "out")
    run = Run(RunSpec(prompts=["a", "b", "c"], tier="256p", frames=5), pool, store)
    board = RequestBoard()
    board.add_run(run)
    done, cancelled, other = run.views
    for view in run.views:
        view.send_to("http://gpu-node:8000")
        view.accept(JOB_ID_PREFIX + view.id)
    done.finish(RequestState.DONE, None)
    cancelled.finish(RequestState.CANCELLED, "cancelled by the user")
    other.job_id = "video_gen_1"  # a vLLM-Omni job: its rows keep their notes
    other.finish(RequestState.DONE, None)
    notes = dict(zip(tables.request_table(board)["id"], tables.request_table(board)["note"], strict=True))
    assert notes[tables.short(done.id)] == LATENCY_ONLY
    assert notes[tables.short(cancelled.id)] == f"cancelled by the user; {NO_CANCEL}"
    assert notes[tables.short(other.id)] == ""
    store.close()


def test_a_server_without_the_generate_route_is_named_as_another_kind():
    with pytest.raises(RequestRejected, match=r"no POST /generate \(is it a Cosmos Framework server\?\)"):
        CLIENT._answer_record(queued(), answer(404, {"detail": "Not Found"}), 5.0)
