"""The form of POST /v1/videos (the contract's fields, protocol.VideoRequest) as the one RunSpec the page would make
of it: one prompt, one copy, checked with the page's checks and given the page's defaults.

What the contract leaves to the server, the studio fills as its page does: a size not sent is the studio's default
tier (`--default-tier`) at 16:9; frames, steps and guidance not sent are the engine's defaults for the tier. A size
is one of the studio's tiers' (tiers.SIZES); frames are rounded to the 4k+1 the model makes. Every problem is a
`FormProblem`: a 400 whose message names the field by its wire name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from studio import tiers
from studio.backend.face import RunSpec, count_range, describe
from studio.protocol import ErrorResponse, VideoRequest

# RunSpec's fields by the contract's names, for a message that names what the caller sent.
WIRE_NAME = {
    "prompts": "prompt",
    "frames": "num_frames",
    "steps": "num_inference_steps",
    "guidance": "guidance_scale",
    "image_url": "image_reference",
    "tier": "size",
    "aspect": "size",
}
# Fields of the contract that the studio's requests do not carry: refused, never dropped in silence.
NOT_TAKEN = {
    "guidance_scale_2": "the studio sends one guidance scale (guidance_scale)",
    "true_cfg_scale": "the studio sends one guidance scale (guidance_scale)",
    "boundary_ratio": "the studio leaves the experts' boundary to its engine",
    "sound_duration": "the studio's sound lasts as long as its video: send generate_sound alone",
    "video_reference": "the studio takes an image to start from (input_reference or image_reference), no video",
}


@dataclass
class FormProblem(Exception):
    """What is wrong with a form, as the error envelope says it."""

    message: str
    param: str | None = None
    status: int = 400

    @classmethod
    def of_validation(cls, exc: ValidationError) -> FormProblem:
        error = ErrorResponse.invalid_request(exc).error
        return cls(error.message, error.param)


def _tier_sizes() -> str:
    return "; ".join(
        f"{tier}: " + ", ".join(f"{w}x{h}" for w, h in by_aspect.values()) for tier, by_aspect in tiers.SIZES.items()
    )


def contract_request(form: Mapping[str, Any]) -> tuple[VideoRequest, set[str]]:
    """The form's fields as the contract checks them, and the names of those sent."""
    values = VideoRequest.form_values(form)
    try:
        return VideoRequest.model_validate(values), set(values)
    except ValidationError as exc:
        raise FormProblem.of_validation(exc) from None


def image_url_of(reference: str | None) -> str | None:
    """image_reference's URL: the form sends it as JSON, {"image_url": "..."}."""
    if reference is None:
        return None
    try:
        parsed = json.loads(reference)
    except ValueError:
        parsed = None
    url = parsed.get("image_url") if isinstance(parsed, dict) else None
    if not isinstance(url, str):
        raise FormProblem('image_reference must be JSON {"image_url": "https://..."}', "body.image_reference")
    return url


def run_spec(request: VideoRequest, sent: set[str], *, model_name: str, default_tier: str) -> RunSpec:
    """The RunSpec of one checked form (its defaults left empty for RunSpec.resolved); an uploaded image is the
    caller's to add once kept."""
    if request.model is not None and request.model != model_name:
        raise FormProblem(
            f"Model mismatch: request specifies {request.model!r} but this studio serves {model_name!r}.",
            "body.model",
        )
    for name, why in NOT_TAKEN.items():
        if name in sent:
            raise FormProblem(f"{name} is not taken here: {why}", f"body.{name}")
    if sent & {"size", "width", "height"}:
        found = tiers.tier_and_aspect_of_size(request.width, request.height)
        if found is None:
            raise FormProblem(
                f"size {request.size} is none of the studio's tiers' sizes ({_tier_sizes()})",
                "body.size" if "size" in sent else "body.width",
            )
        tier, aspect = found
    else:
        tier, aspect = default_tier, tiers.DEFAULT_ASPECT
    frames = request.requested_frames if sent & {"num_frames", "seconds"} else None
    values = {
        "prompts": [request.prompt],
        "negative_prompt": request.negative_prompt,
        "tier": tier,
        "aspect": aspect,
        "frames": frames,
        "fps": request.fps,
        "steps": request.num_inference_steps,
        "guidance": request.guidance_scale,
        "flow_shift": request.flow_shift,
        "seed": request.seed,
        "extra_params": request.extra_params,
        "image_url": image_url_of(request.image_reference),
        "generate_sound": bool(request.generate_sound),
    }
    try:
        return RunSpec(**values)
    except ValidationError as exc:
        raise spec_problem(exc, tier) from None


def spec_problem(exc: ValidationError, tier: str) -> FormProblem:
    """A RunSpec's failed check, its fields by their wire names."""
    first = exc.errors()[0]["loc"]
    field = WIRE_NAME.get(str(first[0]), str(first[0])) if first else None
    message = describe(exc, lambda name: WIRE_NAME.get(name, name), lambda name: count_range(name, tier))
    return FormProblem(message, f"body.{field}" if field else None)


def shape_problem(message: str) -> FormProblem:
    """A tier's refusal (tiers.TierError: frames out of the tier's range, an fps it does not make), by the field's
    wire name."""
    for studio_name, wire in (("frames", "num_frames"), ("fps", "fps"), ("unknown tier", "size")):
        if message.startswith(studio_name):
            return FormProblem(f"{wire}: {message}" if wire != studio_name else message, f"body.{wire}")
    return FormProblem(message)
