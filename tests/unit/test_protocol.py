import json

import pytest
from pydantic import ValidationError

from studio.protocol import (
    JobStatus,
    VideoRequest,
    error_message,
    is_guardrail_block,
    job_record_from_body,
)


def test_form_fields_use_server_names_and_json_extra_params():
    request = VideoRequest(
        prompt="a cat",
        width=320,
        height=192,
        num_frames=33,
        fps=24,
        num_inference_steps=8,
        guidance_scale=6.0,
        seed=7,
        generate_sound=False,
        extra_params={"guardrails": False, "use_resolution_template": True},
    )
    fields = request.form_fields()
    assert fields["size"] == "320x192"
    assert fields["num_frames"] == "33"
    assert fields["generate_sound"] == "false"
    assert json.loads(fields["extra_params"]) == {"guardrails": False, "use_resolution_template": True}
    assert "negative_prompt" not in fields and "width" not in fields


def test_request_validation_matches_server_limits():
    with pytest.raises(ValidationError):
        VideoRequest(prompt="x", width=320, height=192, num_inference_steps=201)
    with pytest.raises(ValidationError):
        VideoRequest(prompt="x", width=320, height=192, guidance_scale=21)
    with pytest.raises(ValidationError):
        VideoRequest(prompt="", width=320, height=192)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "Model mismatch", "type": "BadRequestError", "code": 400}}, "Model mismatch"),
        ({"detail": "Video abc not found"}, "Video abc not found"),
        ({"detail": [{"loc": ["body", "prompt"], "msg": "Field required"}]}, "prompt: Field required"),
        ({"error": "Unauthorized"}, "Unauthorized"),
        (b"plain text failure", "plain text failure"),
    ],
)
def test_error_message_reads_every_envelope(body, message):
    assert error_message(body) == message


def test_failed_job_body_is_a_result():
    body = {
        "id": "video_gen_1",
        "object": "video",
        "status": "failed",
        "progress": 0,
        "error": {"code": 400, "message": "Input was blocked by Cosmos3 guardrails."},
    }
    record = job_record_from_body(json.dumps(body))
    assert record is not None and record.status is JobStatus.FAILED and record.finished
    assert is_guardrail_block(record.error.message)
    assert job_record_from_body({"error": {"message": "x"}}) is None
    assert not is_guardrail_block("CUDA out of memory")
