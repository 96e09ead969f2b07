"""The gateway's form as the page's RunSpec (sizes are the tiers', defaults the page's, fields the studio does not
send refused by name), an uploaded image kept as the page keeps its own, and a History row as the contract's record
(a failure's code, the status it is answered with)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from PIL import Image

from studio.config import StudioSettings
from studio.gateway import forms, records
from studio.gateway.forms import FormProblem
from studio.gateway.serving import GatewayProblem, Upload, VideoGateway
from studio.protocol import JobStatus


def spec_of(**fields: str):
    request, sent = forms.contract_request({"prompt": "a red circle", **fields})
    return forms.run_spec(request, sent, model_name="small", default_tier="480p")


def test_a_size_is_a_tier_and_an_aspect_and_none_is_the_pages_default():
    spec = spec_of(size="256x256", num_frames="9")
    assert (spec.tier, spec.aspect, spec.frames) == ("256p", "1:1", 9)
    spec = spec_of(seconds="2", fps="8")
    assert (spec.tier, spec.aspect, spec.frames, spec.steps) == ("480p", "16:9", 16, None)  # the rest: resolved


@pytest.mark.parametrize(
    ("fields", "param", "said"),
    [
        ({"size": "123x45"}, "body.size", "256x256"),
        ({"model": "sora-2"}, "body.model", "Model mismatch"),
        ({"guidance_scale_2": "3"}, "body.guidance_scale_2", "not taken here"),
        ({"image_reference": "not json"}, "body.image_reference", "image_url"),
        ({"num_inference_steps": "500"}, "body.num_inference_steps", "num_inference_steps"),
        ({"prompt": " "}, "body.prompt", "prompt"),
    ],
)
def test_a_bad_field_is_named_by_its_form_name(fields, param, said):
    with pytest.raises(FormProblem) as problem:
        spec_of(**fields)
    assert problem.value.param == param and said in problem.value.message


def row(state: str, error: str | None = None) -> dict:
    parameters = {"width": 256, "height": 256, "size": "256x256", "num_frames": 5, "fps": 24}
    return {
        "id": "req_0123456789ab",
        "prompt": "p",
        "state": state,
        "error": error,
        "created_at": 1.5,
        "parameters": parameters,
        "timings": {},
        "video_path": None,
        "sidecar_path": None,
    }


def test_a_history_row_is_the_contracts_record():
    done = records.record_of_row(row("done"), operator=False, model="small")
    assert (done.status, done.model, done.seconds, records.http_status(done)) == (
        JobStatus.COMPLETED,
        "small",
        "1",
        200,
    )
    blocked = records.record_of_row(row("failed", "Input was blocked by Cosmos3 guardrails."), False, "small")
    assert blocked.status is JobStatus.FAILED and records.http_status(blocked) == 400
    lost = records.record_of_row(row("lost", "cannot reach http://10.0.0.7:8001: refused"), False, "small")
    assert records.http_status(lost) == 500 and "10.0.0.7" not in lost.error.message
    cancelled = records.record_of_row(row("cancelled"), False, "small")
    assert cancelled.error.code == "cancelled" and records.http_status(cancelled) == 200


def test_an_upload_is_kept_by_its_content_where_the_engine_takes_images(tmp_path):
    settings = StudioSettings(engine="remote", remote_urls=["http://127.0.0.1:9"])
    gateway = VideoGateway(SimpleNamespace(settings=settings, store=SimpleNamespace(root=tmp_path)))
    image = io.BytesIO()
    Image.new("RGB", (32, 32), "blue").save(image, format="PNG")
    kept = gateway._kept_upload(Upload("first frame.PNG", image.getvalue()))
    assert kept.parent == tmp_path / "uploads" and kept.suffix == ".png" and kept.read_bytes() == image.getvalue()
    with pytest.raises(GatewayProblem) as refused:
        gateway._kept_upload(Upload("notes.png", b"not an image"))
    assert refused.value.param == "body.input_reference"
    assert sorted(path.name for path in (tmp_path / "uploads").iterdir()) == [kept.name]  # nothing else left
