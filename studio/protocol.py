"""The vLLM-Omni video API contract, client side, in one place.

A `VideoRequest` becomes the multipart form fields of POST /v1/videos; a `JobRecord` is what GET
/v1/videos/{id} returns. Error bodies come in two envelopes (FastAPI's {"detail": ...} and vLLM's
{"error": {...}}); `error_message` reads both.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

GUARDRAIL_MARKERS = ("blocked by", "guardrail")
MAX_PROMPT_CHARS = 20_000


class JobStatus(StrEnum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class JobError(BaseModel):
    model_config = ConfigDict(extra="allow")
    code: int | str | None = None
    message: str = ""


class JobRecord(BaseModel):
    """A job as the server reports it. Unknown fields are kept: servers add fields over time."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "video"
    status: JobStatus
    progress: float = 0
    model: str | None = None
    prompt: str | None = None
    size: str | None = None
    seconds: str | None = None
    quality: str | None = None
    created_at: float | None = None
    completed_at: float | None = None
    expires_at: float | None = None
    error: JobError | None = None
    media_type: str | None = None
    file_name: str | None = None
    inference_time_s: float | None = None
    stage_durations: dict[str, Any] | None = None
    peak_memory_mb: float | None = None
    fps: float | None = None
    num_frames: int | None = None
    duration_s: float | None = None

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds_as_text(cls, value: object) -> object:
        return None if value is None else str(value)

    @property
    def finished(self) -> bool:
        return self.status in (JobStatus.COMPLETED, JobStatus.FAILED)


class VideoRequest(BaseModel):
    """One video to make, in the server's own field names."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    negative_prompt: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    model: str | None = None
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    num_frames: int | None = Field(default=None, gt=0)
    fps: int | None = Field(default=None, gt=0)
    num_inference_steps: int | None = Field(default=None, ge=1, le=200)
    guidance_scale: float | None = Field(default=None, ge=0, le=20)
    guidance_scale_2: float | None = None
    flow_shift: float | None = None
    true_cfg_scale: float | None = None
    boundary_ratio: float | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    generate_sound: bool | None = None
    sound_duration: float | None = Field(default=None, gt=0)
    # Model-specific keys (Cosmos 3: guardrails, use_resolution_template, ...); sent as one JSON string.
    extra_params: dict[str, Any] = Field(default_factory=dict)
    input_reference: Path | None = None

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    def form_fields(self) -> dict[str, str]:
        """The multipart text fields, exactly as the server expects them (no file parts)."""
        fields: dict[str, str] = {"prompt": self.prompt, "size": self.size}
        scalar_names = (
            "negative_prompt",
            "model",
            "num_frames",
            "fps",
            "num_inference_steps",
            "guidance_scale",
            "guidance_scale_2",
            "flow_shift",
            "true_cfg_scale",
            "boundary_ratio",
            "seed",
            "sound_duration",
        )
        for name in scalar_names:
            value = getattr(self, name)
            if value is not None:
                fields[name] = str(value)
        if self.generate_sound is not None:
            fields["generate_sound"] = "true" if self.generate_sound else "false"
        if self.extra_params:
            # A nested object would be flattened with brackets by multipart encoders: send a JSON string.
            fields["extra_params"] = json.dumps(self.extra_params)
        return fields

    def parameters(self) -> dict[str, Any]:
        """What a sidecar records: every field, the reference as its file name."""
        data = self.model_dump(mode="json", exclude_none=True)
        if self.input_reference is not None:
            data["input_reference"] = self.input_reference.name
        return data


def error_message(body: Any, fallback: str = "") -> str:
    """The human message of an error body in any of the envelopes servers use."""
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
            parts = []
            for item in detail:
                if isinstance(item, dict):
                    where = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                    parts.append(f"{where}: {item.get('msg', item)}" if where else str(item.get("msg", item)))
                else:
                    parts.append(str(item))
            return "; ".join(parts)
        if body.get("message"):
            return str(body["message"])
    return fallback or str(body)


def job_record_from_body(body: Any) -> JobRecord | None:
    """A job record carried by a response body (a failed job comes with a non-200 status), else None."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if isinstance(body, dict) and "id" in body and "status" in body:
        try:
            return JobRecord.model_validate(body)
        except ValueError:
            return None
    return None


def is_guardrail_block(message: str | None) -> bool:
    text = (message or "").lower()
    return all(marker in text for marker in GUARDRAIL_MARKERS)
