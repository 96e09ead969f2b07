"""The vLLM-Omni video API contract, in one place, for the studio's client, the embedded engine and the tests.

POST /v1/videos and /v1/videos/sync take a multipart form that fills a `VideoRequest` (the engine validates the
received form into it; the client turns one into the form). GET /v1/videos/{id}, and POST /v1/videos itself, answer
a `JobRecord`; GET /v1/videos a `JobList`; DELETE a `JobDeleted`. Errors outside a job record come in vLLM's
envelope, `ErrorResponse`. vLLM-Omni declares the same in its `protocol/videos.py`; where the embedded engine
differs, docs/compatibility.md says so. One difference is declared here: the keys of extra_params the engine takes
(`EngineExtraParams`), where vLLM-Omni passes any key to its pipeline.
"""

# Without `from __future__ import annotations`: pydantic then reads the field types as objects instead of compiling
# each one from text, which keeps importing this module (the CLI's start-up) quick.
import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from studio.engine_levers import StepCacheName

# ---- defaults and limits ------------------------------------------------------------------------------------
DEFAULT_FPS = 24
DEFAULT_SECONDS = 4  # OpenAI's videos API default, used when neither num_frames nor seconds is sent
DEFAULT_WIDTH, DEFAULT_HEIGHT = 832, 480
MAX_PROMPT_CHARS = 20_000
MIN_SIDE, MAX_SIDE = 16, 4096
MAX_REQUEST_FRAMES = 1025  # any request of the wire contract; a tier has its own ceiling (tiers.TIER_MAX_FRAMES)
MAX_FPS = 120
MIN_STEPS, MAX_STEPS = 1, 200
MIN_GUIDANCE, MAX_GUIDANCE = 0.0, 20.0
MAX_FLOW_SHIFT = 100.0
MAX_SEED = 2**63 - 1  # the largest signed 64-bit integer, vLLM-Omni's bound
# Seeds drawn at random (by the studio for a run, by the engine for a request that sends none) stay below this: 32
# bits, which every pipeline's generator takes (torch's takes 64, numpy's RandomState 32), and short to read. A seed
# the user gives may be anything up to MAX_SEED.
RANDOM_SEED_BOUND = 2**32
MAX_SEQUENCE_LENGTH = 512  # text tokens a prompt is encoded to (Wan's and Cosmos' T5 default)
SIZE_PATTERN = re.compile(r"^\d+x\d+$")
SECONDS_PATTERN = re.compile(r"^[1-9]\d*$")
GUARDRAIL_MARKERS = ("blocked by", "guardrail")
# The `quality` values vLLM-Omni takes (its DIFFUSION_QUALITY_LEVELS), and what its record says where none was sent.
QUALITY_LEVELS = ("lossless", "high")
DEFAULT_QUALITY = "default"

# Error types of the contract's own checks. Their messages are whole sentences; a form field whose JSON cannot be
# read names no `param`, as vLLM-Omni rejects it before its model sees the form.
FORM_FIELD_ERROR = "form_field"
JSON_FORM_FIELD_ERROR = "json_form_field"


def _strip_text(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


# Field types that other forms of the studio reuse, so that each limit is written once.
InferenceSteps = Annotated[int, Field(ge=MIN_STEPS, le=MAX_STEPS)]
GuidanceScale = Annotated[float, Field(ge=MIN_GUIDANCE, le=MAX_GUIDANCE)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
FrameSide = Annotated[int, Field(ge=MIN_SIDE, le=MAX_SIDE)]
# A form sends booleans as text: "true", "false", "1", "0", "yes", "no", "on", "off", with any spaces around.
FormBool = Annotated[bool, BeforeValidator(_strip_text)]


def _form_error(message: str) -> PydanticCustomError:
    return PydanticCustomError(FORM_FIELD_ERROR, message)


def _shown(value: object) -> str:
    return repr(value[:50]) if isinstance(value, str) else repr(value)


# ---- the request --------------------------------------------------------------------------------------------
class VideoRequest(BaseModel):
    """One video to make: the form fields of POST /v1/videos, by their wire names.

    The frame size comes from `size` or from `width` and `height` (`size` wins); once validated, all three are set.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt: str = Field(max_length=MAX_PROMPT_CHARS, description="What the video shows.")
    negative_prompt: str | None = Field(
        default=None, max_length=MAX_PROMPT_CHARS, description="What the video should not show."
    )
    model: str | None = Field(
        default=None, description="The served model's name; a server running another model answers 400."
    )
    size: str | None = Field(default=None, description="WIDTHxHEIGHT, e.g. 832x480; wins over width and height.")
    width: FrameSide = Field(default=DEFAULT_WIDTH, description="Frame width in pixels, when size is not sent.")
    height: FrameSide = Field(default=DEFAULT_HEIGHT, description="Frame height in pixels, when size is not sent.")
    num_frames: int | None = Field(default=None, ge=1, le=MAX_REQUEST_FRAMES, description="Frames to make.")
    fps: int | None = Field(
        default=None, ge=1, le=MAX_FPS, description=f"Frames per second of the video; {DEFAULT_FPS} when not sent."
    )
    # Declared after num_frames and fps: its check reads both.
    seconds: str | None = Field(
        default=None,
        validate_default=True,
        description=f"Whole seconds; num_frames is seconds x fps when not sent ({DEFAULT_SECONDS} s when neither is).",
    )
    num_inference_steps: InferenceSteps | None = Field(
        default=None, description="Denoising steps; the server's default when not sent."
    )
    guidance_scale: GuidanceScale | None = Field(
        default=None, description="Classifier-free guidance scale; the server's default when not sent."
    )
    guidance_scale_2: GuidanceScale | None = Field(
        default=None, description="Guidance scale of the high-noise expert (Wan 2.2)."
    )
    flow_shift: float | None = Field(default=None, ge=0, le=MAX_FLOW_SHIFT, description="The scheduler's flow shift.")
    true_cfg_scale: GuidanceScale | None = Field(default=None, description="True CFG scale, for models that take it.")
    boundary_ratio: float | None = Field(
        default=None, ge=0, le=1, description="Where the low-noise expert takes over (Wan 2.2)."
    )
    seed: Seed | None = Field(default=None, description="Random seed; the server draws one when not sent.")
    generate_sound: FormBool | None = Field(default=None, description="Make a sound track, for models that can.")
    sound_duration: float | None = Field(default=None, gt=0, description="Seconds of sound to make.")
    quality: str | None = Field(
        default=None,
        description=f"Quality intent, one of {', '.join(QUALITY_LEVELS)}; what it changes is the model's business.",
    )
    lora: dict[str, Any] | None = Field(
        default=None,
        description="A LoRA adapter for this request, as one JSON object in a single form field (name and path).",
    )
    return_stage_metrics: FormBool | None = Field(
        default=None, description="True: the finished job's record carries the server's stage metrics."
    )
    extra_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Model-specific keys (Cosmos 3: guardrails, use_resolution_template, ...), sent as one JSON "
        "object in a single form field.",
    )
    input_reference: Path | None = Field(
        default=None, description="An image or video to start from, sent as a file part (its name, on a server)."
    )
    image_reference: str | None = Field(default=None, description='JSON {"image_url": ...}; not with input_reference.')
    video_reference: str | None = Field(default=None, description='JSON {"video_url": ...}; not with input_reference.')

    @field_validator("prompt")
    @classmethod
    def _prompt_has_words(cls, prompt: str) -> str:
        if not prompt.strip():
            raise _form_error("prompt is required")
        if "\x00" in prompt:
            raise _form_error("prompt may not contain NUL characters")
        return prompt

    @field_validator("size")
    @classmethod
    def _size_is_width_x_height(cls, size: str | None) -> str | None:
        if size is None:
            return None
        if not SIZE_PATTERN.match(size):
            raise _form_error(f"size must look like WIDTHxHEIGHT (e.g. 832x480), got {_shown(size)}")
        width, height = (int(side) for side in size.split("x"))
        if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE):
            raise _form_error(f"width and height must be between {MIN_SIDE} and {MAX_SIDE}, got {size}")
        return size

    @field_validator("seconds")
    @classmethod
    def _seconds_make_few_enough_frames(cls, seconds: str | None, info: ValidationInfo) -> str | None:
        if seconds is not None and not SECONDS_PATTERN.match(seconds):
            raise _form_error(f"seconds must be a positive whole number, got {_shown(seconds)}")
        # num_frames or fps missing from the data means they failed their own checks.
        if "fps" in info.data and info.data.get("num_frames", 0) is None:
            frames = int(seconds or DEFAULT_SECONDS) * (info.data["fps"] or DEFAULT_FPS)
            if frames > MAX_REQUEST_FRAMES:
                raise _form_error(f"seconds x fps gives {frames} frames; at most {MAX_REQUEST_FRAMES}")
        return seconds

    @field_validator("quality")
    @classmethod
    def _quality_is_a_level(cls, quality: str | None) -> str | None:
        if quality is not None and quality not in QUALITY_LEVELS:
            raise _form_error(f"quality must be one of {list(QUALITY_LEVELS)}, got {_shown(quality)}")
        return quality

    @field_validator("extra_params", "lora", mode="before")
    @classmethod
    def _object_from_json(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        name = info.field_name
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise PydanticCustomError(
                JSON_FORM_FIELD_ERROR,
                "Invalid JSON in form field: {name} is not valid JSON ({reason}).",
                {"name": name, "reason": str(exc)},
            ) from exc
        if not isinstance(value, dict):
            raise PydanticCustomError(
                JSON_FORM_FIELD_ERROR,
                "Invalid JSON in form field: expected dict, got {kind}. {name} must be a JSON object.",
                {"name": name, "kind": type(value).__name__},
            )
        return value

    @field_validator("extra_params")
    @classmethod
    def _guardrails_is_a_boolean(cls, extra: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(extra.get("guardrails", True), bool):
            raise _form_error("extra_params.guardrails must be true or false")
        return extra

    @model_validator(mode="after")
    def _one_size_and_one_reference(self) -> Self:
        if self.size is not None:
            self.width, self.height = (int(side) for side in self.size.split("x"))
        else:
            self.size = f"{self.width}x{self.height}"
        if self.input_reference is not None and (self.image_reference or self.video_reference):
            raise _form_error("input_reference cannot be combined with image_reference or video_reference")
        return self

    @property
    def output_fps(self) -> int:
        return self.fps or DEFAULT_FPS

    @property
    def requested_frames(self) -> int:
        """num_frames, or seconds x fps when it is not sent."""
        if self.num_frames is not None:
            return self.num_frames
        return int(self.seconds or DEFAULT_SECONDS) * self.output_fps

    @property
    def sent_frames(self) -> int | None:
        """The frames the request itself names (num_frames, or seconds x fps); None where it sent neither, as
        vLLM-Omni's record then leaves num_frames null."""
        if self.num_frames is None and self.seconds is None:
            return None
        return self.requested_frames

    @property
    def has_reference(self) -> bool:
        return any(ref is not None for ref in (self.input_reference, self.image_reference, self.video_reference))

    @classmethod
    def form_values(cls, form: Mapping[str, Any]) -> dict[str, Any]:
        """What a received multipart form gives this model: its text fields that the contract names (unknown ones
        are dropped, as vLLM-Omni drops them; empty ones count as not sent, as a browser sends every field), and
        an uploaded input_reference as its file name."""
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            value = form.get(name)
            if isinstance(value, str):
                if value != "":
                    values[name] = value
            elif name == "input_reference" and value is not None:  # an upload
                values[name] = getattr(value, "filename", None) or name
        return values

    def form_fields(self) -> dict[str, str]:
        """The multipart text fields, exactly as the server expects them (no file parts)."""
        wire = self.model_dump(exclude_none=True, exclude={"width", "height", "input_reference"})
        fields: dict[str, str] = {}
        for name, value in wire.items():
            if isinstance(value, bool):
                fields[name] = "true" if value else "false"
            elif isinstance(value, dict):
                if value:
                    # A nested object would be flattened with brackets by multipart encoders: send a JSON string.
                    fields[name] = json.dumps(value)
            else:
                fields[name] = str(value)
        return fields

    def parameters(self) -> dict[str, Any]:
        """What a sidecar records: every field, the reference as its file name."""
        data = self.model_dump(mode="json", exclude_none=True)
        if self.input_reference is not None:
            data["input_reference"] = self.input_reference.name
        return data


# ---- extra_params, as the embedded engine takes them --------------------------------------------------------
# Names other servers give to form fields (the Cosmos Framework's body): in extra_params they repeat a field too.
FORM_FIELD_ALIASES = {"shift": "flow_shift", "num_steps": "num_inference_steps", "guidance": "guidance_scale"}


class EngineExtraParams(BaseModel):
    """The keys of extra_params that the embedded engine takes, each with its type and bounds.

    vLLM-Omni hands any key to its pipeline as-is, and the studio's request (`VideoRequest.extra_params`) sends
    whatever it is given. The engine takes only these: a key that repeats a form field would pass the form's limits
    and the guardrail (which checks the prompt field), and the pipeline's own arguments (latents, generator,
    return_dict, ...) break it. Any other key is a 400 that names it (`of_request`).
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    guardrails: bool = Field(
        default=True,
        description="False: the engine's guardrail does not check this request (none can be turned on for a server "
        "started without them). The engine's own switch; never passed to the pipeline.",
    )
    max_sequence_length: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQUENCE_LENGTH,
        description="Text tokens the prompt is encoded to, for a pipeline that takes it (Wan); such a request runs "
        "alone, outside any batch.",
    )
    use_resolution_template: bool | None = Field(
        default=None, description="Cosmos 3: add the resolution prompt suffix; for a pipeline that takes it."
    )
    use_duration_template: bool | None = Field(
        default=None, description="Cosmos 3: add the duration prompt suffix; for a pipeline that takes it."
    )
    previews: bool = Field(
        default=True,
        description="False: the engine makes no previews of this request (none are made where the server has them "
        "off). The engine's own switch; never passed to the pipeline.",
    )

    step_cache: StepCacheName | None = Field(
        default=None,
        description="This request's step cache (the server's --step-cache where not sent): off computes every "
        "step; reuse and taylor skip some and estimate them. The engine's own; never passed to the pipeline.",
    )

    @classmethod
    def of_request(cls, extra: Mapping[str, Any]) -> Self:
        """The keys of a request's extra_params, checked. Raises ValidationError located at extra_params.KEY (so
        that `ErrorResponse.invalid_request` answers 400 with param body.extra_params.KEY): for a key that repeats
        a form field (use that field), a key not listed here, or a value out of its key's bounds."""
        refused = [_refused_key(key, value) for key, value in extra.items() if key not in cls.model_fields]
        if refused:
            raise ValidationError.from_exception_data(cls.__name__, refused)
        return _EngineExtraField.model_validate({"extra_params": dict(extra)}).extra_params

    def pipeline_params(self) -> dict[str, Any]:
        """The keys that go to the pipeline (where its call takes them): those sent, less the engine's own."""
        return self.model_dump(exclude_none=True, exclude={"guardrails", "previews", "step_cache"})


class _EngineExtraField(BaseModel):
    """Validates EngineExtraParams where the form has it, so that an error is located at extra_params.KEY."""

    extra_params: EngineExtraParams


def _refused_key(key: str, value: object) -> InitErrorDetails:
    field = key if key in VideoRequest.model_fields else FORM_FIELD_ALIASES.get(key)
    if field is not None:
        message = f"extra_params.{key} is a form field here: send the {field} form field instead"
    else:
        taken = ", ".join(EngineExtraParams.model_fields)
        message = f"extra_params.{key} is not a key this server takes; extra_params may carry {taken}"
    return {"type": _form_error(message), "loc": ("extra_params", key), "input": value}


# ---- the job record -----------------------------------------------------------------------------------------
class JobStatus(StrEnum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class JobError(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: int | str | None = Field(default=None, description="The HTTP status a failed job is answered with.")
    message: str = Field(default="", description="Why the job failed.")


class JobRecord(BaseModel):
    """A job as a server reports it, in vLLM-Omni's field order. Unknown fields are kept: servers add fields over
    time. Timestamps and progress are whole numbers on vLLM-Omni and the engine; other servers may send floats."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, description="The model that makes the video.")
    prompt: str | None = None
    id: str = Field(description='"video_gen_<hex>"; "video_sync-<hex>" for a request of the sync route.')
    object: str = "video"
    status: JobStatus
    size: str | None = Field(default=None, description="The size field as sent (vLLM-Omni shows nothing else).")
    progress: int | float = Field(default=0, description="0 to 100.")
    seconds: str | None = Field(
        default=None,
        description=f'As sent. Where none was sent, vLLM-Omni answers "{DEFAULT_SECONDS}"; the embedded engine null '
        "until the video is made, then its length in whole seconds.",
    )
    quality: str | None = Field(default=None, description=f'As sent; "{DEFAULT_QUALITY}" when not sent.')
    completed_at: int | float | None = None
    created_at: int | float | None = None
    remixed_from_video_id: str | None = None
    error: JobError | None = None
    media_type: str | None = None
    expires_at: int | float | None = None
    file_name: str | None = None
    inference_time_s: float | None = None
    fps: float | None = None
    num_frames: int | None = Field(
        default=None,
        description="As requested (null where neither num_frames nor seconds was sent); once completed, as in the "
        "video.",
    )
    duration_s: float | None = None
    metrics: dict[str, Any] | None = Field(
        default=None, description="The server's stage metrics, once completed, where the request asked for them."
    )
    stage_durations: dict[str, Any] | None = None
    peak_memory_mb: float | None = None
    action: dict[str, Any] | None = None
    # The embedded engine's own: the model made another size and the frames were resized. Left out when unset, so
    # the record has vLLM-Omni's fields and no others.
    native_size: str | None = Field(default=None, exclude_if=lambda value: value is None)
    # The embedded engine's own: the speed levers that changed how this job was made (a step cache); left out
    # where none did, so that an exact job's record is vLLM-Omni's.
    levers: dict[str, str] | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds_as_text(cls, value: object) -> object:
        return None if value is None else str(value)

    @property
    def finished(self) -> bool:
        return self.status in (JobStatus.COMPLETED, JobStatus.FAILED)


class JobList(BaseModel):
    """GET /v1/videos: one page of records."""

    object: Literal["list"] = "list"
    data: list[JobRecord]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False

    @classmethod
    def page(cls, records: Iterable[JobRecord], has_more: bool) -> Self:
        data = list(records)
        return cls(
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=has_more,
        )


class JobDeleted(BaseModel):
    """DELETE /v1/videos/{id}."""

    id: str
    deleted: bool = True
    object: Literal["video.deleted"] = "video.deleted"


# ---- the studio's extension: a job's events (GET /v1/videos/{video_id}/events, server-sent events) -------------
# Not in vLLM-Omni's contract (docs/compatibility.md): the embedded engine offers it, and the studio follows it where
# the server offers it, and polls where it does not.
EVENTS_MEDIA_TYPE = "text/event-stream"
# GET /v1/videos/{video_id}/preview: the step its image shows, and of how many (the studio's extension).
PREVIEW_STEP_HEADER = "X-Preview-Step"
PREVIEW_TOTAL_STEPS_HEADER = "X-Preview-Total-Steps"
# The studio's extension: the order a client sent its POSTs in, "STREAM.SEQ" (docs/compatibility.md).
ORDER_HEADER = "X-Omni-Studio-Order"


class EventType(StrEnum):
    PROGRESS = "progress"  # a denoising step done: ProgressEvent
    STATUS = "status"  # the job's record, whenever its state changes: JobRecord
    PREVIEW = "preview"  # an image of the job's current estimate of the video: PreviewEvent


class ProgressEvent(BaseModel):
    """A denoising step of one job, as the device finished it."""

    step: int = Field(ge=0, description="steps done")
    total_steps: int = Field(ge=1)
    progress: int = Field(ge=0, le=100, description="as the job record's progress")
    elapsed_s: float = Field(ge=0, description="since the job's denoising began")
    step_s: float | None = Field(default=None, ge=0, description="the last step's time, from the step before it")


class PreviewEvent(BaseModel):
    """What the job's video looks like at `step`: a small image, as a data URL (image/webp or image/jpeg)."""

    step: int = Field(ge=0)
    image: str = Field(pattern=r"^data:image/(webp|jpeg|png);base64,")


def server_sent_event(kind: EventType, data: BaseModel) -> bytes:
    """One event of a stream, as text/event-stream frames it."""
    return f"event: {kind.value}\ndata: {data.model_dump_json()}\n\n".encode()


# ---- errors -------------------------------------------------------------------------------------------------
class ErrorInfo(BaseModel):
    message: str
    type: str = Field(description="The HTTP reason phrase, as vLLM renders an HTTPException.")
    param: str | None = Field(default=None, description='The field at fault, as "body.<field>".')
    code: int = Field(description="The HTTP status.")


class ErrorResponse(BaseModel):
    """vLLM's error envelope: {"error": {"message", "type", "param", "code"}}."""

    error: ErrorInfo

    @classmethod
    def of(cls, status: int, message: str, param: str | None = None) -> Self:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        return cls(error=ErrorInfo(message=message, type=phrase, param=param, code=status))

    @classmethod
    def invalid_request(cls, exc: ValidationError) -> Self:
        """A 400 for a request that failed validation: its first problem, as a sentence that names the field."""
        problem = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in problem["loc"])
        param = f"body.{field}" if field and problem["type"] != JSON_FORM_FIELD_ERROR else None
        return cls.of(400, _sentence(problem, field), param)


def _sentence(problem: ErrorDetails, field: str) -> str:
    if problem["type"] in (FORM_FIELD_ERROR, JSON_FORM_FIELD_ERROR) or not field:
        return problem["msg"]
    if problem["type"] == "missing":
        return f"{field} is required"
    return f"{field}: {problem['msg']}, got {_shown(problem['input'])}"


def error_message(body: Any, fallback: str = "") -> str:
    """The human message of an error body in any shape servers use: vLLM's envelope or the object inside it (what
    openai's APIStatusError keeps as `.body`), {"error": "text"}, FastAPI's {"detail": ...}, or plain text."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return body.strip()[:2000] or fallback
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str) and error:
            return error
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):
            return "; ".join(_detail_text(item) for item in detail)
        if body.get("message"):
            return str(body["message"])
    return fallback or str(body)


def _detail_text(item: object) -> str:
    """One entry of FastAPI's validation detail: "field: message"."""
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
    message = str(item.get("msg", item))
    return f"{where}: {message}" if where else message


def job_record_from_body(body: Any) -> JobRecord | None:
    """The job record a response body carries (a failed job comes with a non-200 status), else None."""
    try:
        if isinstance(body, (str, bytes, bytearray)):
            return JobRecord.model_validate_json(body)
        return JobRecord.model_validate(body)
    except ValidationError:
        return None


def is_guardrail_block(message: str | None) -> bool:
    text = (message or "").lower()
    return all(marker in text for marker in GUARDRAIL_MARKERS)
