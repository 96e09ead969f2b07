import json

import pytest
from pydantic import ValidationError

from studio.backend.runs.spec import NO_UPLOAD, TEXT_TO_VIDEO_ONLY, RunSpec
from studio.protocol import (
    DEFAULT_FPS,
    DEFAULT_HEIGHT,
    DEFAULT_SECONDS,
    DEFAULT_WIDTH,
    MAX_REQUEST_FRAMES,
    MAX_SEQUENCE_LENGTH,
    MAX_SIDE,
    QUALITY_LEVELS,
    EngineExtraParams,
    ErrorResponse,
    JobList,
    JobRecord,
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


def test_what_the_client_sends_the_server_reads_back():
    request = VideoRequest(
        prompt="a cat",
        negative_prompt="blur",
        width=320,
        height=192,
        num_frames=33,
        fps=16,
        guidance_scale=6.0,
        flow_shift=3.0,
        seed=2**40,
        generate_sound=True,
        sound_duration=2.0,
        extra_params={"guardrails": False},
    )
    assert VideoRequest.model_validate(VideoRequest.form_values(request.form_fields())) == request


def test_quality_lora_and_stage_metrics_go_as_vllm_omni_reads_them():
    assert QUALITY_LEVELS == ("lossless", "high")  # vLLM-Omni's DIFFUSION_QUALITY_LEVELS
    request = VideoRequest(
        prompt="a cat", quality="high", lora={"name": "style", "path": "/a"}, return_stage_metrics=True
    )
    fields = request.form_fields()
    assert (fields["quality"], fields["return_stage_metrics"]) == ("high", "true")
    assert json.loads(fields["lora"]) == {"name": "style", "path": "/a"}
    assert VideoRequest.model_validate(VideoRequest.form_values(fields)) == request
    assert not {"quality", "lora", "return_stage_metrics"} & set(VideoRequest(prompt="x").form_fields())


@pytest.mark.parametrize(
    ("form", "sent"),
    [
        ({}, None),
        ({"num_frames": "33"}, 33),
        ({"seconds": "2"}, 2 * DEFAULT_FPS),
        ({"seconds": "2", "fps": "8"}, 16),
        ({"num_frames": "9", "seconds": "2"}, 9),
    ],
)
def test_the_frames_a_request_names_are_none_where_it_names_no_length(form, sent):
    assert VideoRequest.model_validate({"prompt": "x", **form}).sent_frames == sent


def test_a_received_form_fills_the_request_with_the_contract_defaults():
    class Upload:
        filename = "start.png"

    values = VideoRequest.form_values(
        {"prompt": "x", "fps": "", "negative_prompt": "", "unknown": "1", "input_reference": Upload(), "seconds": "2"}
    )
    assert values == {"prompt": "x", "seconds": "2", "input_reference": "start.png"}
    request = VideoRequest.model_validate(values)
    assert (request.width, request.height, request.size) == (DEFAULT_WIDTH, DEFAULT_HEIGHT, "832x480")
    assert request.output_fps == DEFAULT_FPS and request.requested_frames == 2 * DEFAULT_FPS
    assert request.has_reference
    sized = VideoRequest.model_validate({"prompt": "x", "size": "64x48", "width": "640", "generate_sound": " Yes "})
    assert (sized.width, sized.height, sized.generate_sound) == (64, 48, True)
    assert VideoRequest(prompt="x").requested_frames == DEFAULT_SECONDS * DEFAULT_FPS


@pytest.mark.parametrize(
    ("form", "param", "message"),
    [
        ({"size": "64x64"}, "body.prompt", "prompt is required"),
        ({"prompt": "x", "size": "640x"}, "body.size", "size must look like WIDTHxHEIGHT (e.g. 832x480), got '640x'"),
        ({"prompt": "x", "size": "8x8"}, "body.size", f"width and height must be between 16 and {MAX_SIDE}, got 8x8"),
        (
            {"prompt": "x", "seconds": "60"},
            "body.seconds",
            f"seconds x fps gives 1440 frames; at most {MAX_REQUEST_FRAMES}",
        ),
        ({"prompt": "x", "extra_params": "[1]"}, None, "Invalid JSON in form field: expected dict, got list."),
        ({"prompt": "x", "extra_params": '{"guardrails": "no"}'}, "body.extra_params", "extra_params.guardrails"),
        ({"prompt": "x", "num_frames": "many"}, "body.num_frames", "num_frames: Input should be a valid integer"),
        (
            {"prompt": "x", "quality": "ultra"},
            "body.quality",
            "quality must be one of ['lossless', 'high'], got 'ultra'",
        ),
        ({"prompt": "x", "quality": "default"}, "body.quality", "quality must be one of ['lossless', 'high']"),
        ({"prompt": "x", "lora": "[1]"}, None, "Invalid JSON in form field: expected dict, got list. lora must be"),
        ({"prompt": "x", "lora": "{bad"}, None, "Invalid JSON in form field: lora is not valid JSON"),
        ({"prompt": "x", "return_stage_metrics": "maybe"}, "body.return_stage_metrics", "return_stage_metrics:"),
        ({"prompt": "x", "guidance_scale": "nan"}, "body.guidance_scale", "guidance_scale: Input should be a finite"),
        (
            {"prompt": "x", "input_reference": "a.png", "image_reference": '{"image_url": "x"}'},
            None,
            "input_reference cannot be combined with image_reference or video_reference",
        ),
    ],
)
def test_an_invalid_form_is_a_400_naming_its_field(form, param, message):
    with pytest.raises(ValidationError) as caught:
        VideoRequest.model_validate(form)
    error = ErrorResponse.invalid_request(caught.value).error
    assert (error.code, error.type, error.param) == (400, "Bad Request", param)
    assert error.message.startswith(message)


def test_job_record_keeps_extra_fields_and_leaves_out_an_unset_native_size():
    record = JobRecord.model_validate({"id": "v", "status": "in_progress", "progress": 37.5, "eta_s": 3})
    assert record.status is JobStatus.IN_PROGRESS and record.progress == 37.5 and record.model_extra == {"eta_s": 3}
    wire = json.loads(record.model_dump_json())
    assert "native_size" not in wire and wire["eta_s"] == 3 and wire["error"] is None
    assert json.loads(record.model_copy(update={"native_size": "40x24"}).model_dump_json())["native_size"] == "40x24"


def test_list_page_and_envelope():
    records = [JobRecord(id=f"v{i}", status=JobStatus.QUEUED) for i in range(3)]
    page = JobList.page(records, has_more=True)
    assert (page.object, page.first_id, page.last_id, page.has_more) == ("list", "v0", "v2", True)
    assert JobList.page([], has_more=False).first_id is None
    assert ErrorResponse.of(404, "Video not found").model_dump() == {
        "error": {"message": "Video not found", "type": "Not Found", "param": None, "code": 404}
    }
    assert error_message(ErrorResponse.of(409, "busy").error.model_dump()) == "busy"  # the SDK's `.body`


# ---- the image for image-to-video, as the studio builds it ---------------------------------------------------
def test_an_image_url_goes_as_the_contracts_image_reference_and_is_recorded():
    (request,) = RunSpec(prompts=["a cat"], image_url="  https://img.example/cat.png ").build_requests()
    assert json.loads(request.image_reference) == {"image_url": "https://img.example/cat.png"}
    fields = request.form_fields()  # what VideoClient sends to vLLM-Omni: a JSON string in one form field
    assert json.loads(fields["image_reference"]) == {"image_url": "https://img.example/cat.png"}
    assert "input_reference" not in fields
    assert request.parameters()["image_reference"] == request.image_reference  # the sidecar and history
    assert RunSpec(prompts=["a cat"], image_url="").build_requests()[0].image_reference is None


@pytest.mark.parametrize(
    "url", ["ftp://img.example/cat.png", "file:///etc/passwd", "cat.png", "https://", "http://a b"]
)
def test_an_image_url_that_is_not_http_is_refused_naming_the_field(url):
    with pytest.raises(ValidationError) as refused:
        RunSpec(prompts=["a cat"], image_url=url)
    (problem,) = refused.value.errors()
    assert problem["loc"] == ("image_url",)
    assert problem["msg"].startswith("must be an http:// or https:// address the server can fetch, got ")


def test_an_image_is_an_upload_or_a_url_not_both(tmp_path):
    with pytest.raises(ValidationError, match="as an upload or as a URL, not both"):
        RunSpec(prompts=["a cat"], image_url="https://img.example/cat.png", input_reference=tmp_path / "cat.png")


@pytest.mark.parametrize(
    ("engine", "upload", "url"),
    [
        ("embedded", TEXT_TO_VIDEO_ONLY, TEXT_TO_VIDEO_ONLY),
        ("vllm-omni", None, None),
        ("remote", None, None),
        ("cosmos-framework", NO_UPLOAD, None),
    ],
)
def test_each_engine_takes_the_image_its_contract_takes(engine, upload, url, tmp_path):
    with_upload = RunSpec(prompts=["a cat"], input_reference=tmp_path / "cat.png")
    with_url = RunSpec(prompts=["a cat"], image_url="https://img.example/cat.png")
    assert (with_upload.image_refusal(engine), with_url.image_refusal(engine)) == (upload, url)
    assert RunSpec(prompts=["a cat"]).image_refusal(engine) is None


# ---- extra_params: anything to vLLM-Omni, only the listed keys to the embedded engine ----------------------
def test_the_client_still_sends_any_extra_params_key_as_given():
    """vLLM-Omni passes any key to its pipeline: the studio's request keeps them, and sends them unchanged."""
    extra = {"guardrails": False, "use_resolution_template": True, "condition_video_keep": 3, "shift": 5.0}
    request = VideoRequest(prompt="a cat", extra_params=extra)
    assert json.loads(request.form_fields()["extra_params"]) == extra
    assert VideoRequest.model_validate(VideoRequest.form_values(request.form_fields())).extra_params == extra


def test_the_engine_takes_the_keys_the_studio_sends():
    (request,) = RunSpec(prompts=["a cat"], guardrails=False).build_requests()
    taken = EngineExtraParams.of_request(request.extra_params)
    assert taken.guardrails is False and taken.pipeline_params() == {}
    assert EngineExtraParams.of_request({}).guardrails is True
    taken = EngineExtraParams.of_request(
        {"max_sequence_length": 64, "use_resolution_template": True, "use_duration_template": False}
    )
    assert taken.guardrails is True
    assert taken.pipeline_params() == {
        "max_sequence_length": 64,
        "use_resolution_template": True,
        "use_duration_template": False,
    }


def refusal(extra: dict) -> tuple[str | None, str]:
    with pytest.raises(ValidationError) as refused:
        EngineExtraParams.of_request(extra)
    error = ErrorResponse.invalid_request(refused.value).error
    assert (error.code, error.type) == (400, "Bad Request")
    return error.param, error.message


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("num_frames", 1500, "num_frames"),
        ("num_inference_steps", 300, "num_inference_steps"),
        ("prompt", "gore", "prompt"),
        ("negative_prompt", "x", "negative_prompt"),
        ("guidance_scale", 50, "guidance_scale"),
        ("seed", -1, "seed"),
        ("height", 100000, "height"),
        ("width", 16, "width"),
        ("size", "32x32", "size"),
        ("fps", 1000, "fps"),
        ("flow_shift", 1e9, "flow_shift"),
        ("shift", 1e9, "flow_shift"),  # the Cosmos Framework's name for it
        ("num_steps", 300, "num_inference_steps"),
        ("guidance", 50, "guidance_scale"),
    ],
)
def test_the_engine_refuses_a_form_field_in_extra_params_and_names_the_form_field(key, value, field):
    param, message = refusal({"guardrails": True, key: value})
    assert param == f"body.extra_params.{key}"
    assert message.startswith(f"extra_params.{key} ") and f"the {field} form field" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("return_dict", False),
        ("latents", "x"),
        ("generator", 1),
        ("output_type", "pt"),
        ("callback_on_step_end", "x"),
        ("prompt_embeds", [1, 2]),
        ("num_videos_per_prompt", 64),
        ("__class__", 1),
    ],
)
def test_the_engine_refuses_a_key_it_does_not_take_and_names_it(key, value):
    param, message = refusal({key: value})
    assert param == f"body.extra_params.{key}"
    assert message.startswith(f"extra_params.{key} is not a key")
    assert all(name in message for name in EngineExtraParams.model_fields)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("max_sequence_length", 0, "greater than or equal to 1"),
        ("max_sequence_length", MAX_SEQUENCE_LENGTH + 1, f"less than or equal to {MAX_SEQUENCE_LENGTH}"),
        ("max_sequence_length", "64", "valid integer"),
        ("max_sequence_length", 64.5, "valid integer"),
        ("max_sequence_length", True, "valid integer"),
        ("use_resolution_template", "yes", "valid boolean"),
        ("use_duration_template", 1, "valid boolean"),
        ("guardrails", None, "valid boolean"),
    ],
)
def test_a_key_the_engine_takes_is_checked_against_its_bounds(key, value, words):
    param, message = refusal({key: value})
    assert param == f"body.extra_params.{key}"
    assert message.startswith(f"extra_params.{key}: ") and words in message
