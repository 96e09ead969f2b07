"""The embedded engine's operations, one method each, mirroring vLLM-Omni's video API: the form is validated into the
contract's request (studio.protocol), and the answers are the contract's job record, list and deletion, or an
ApiError with the same status codes and `param` values as `vllm serve --omni`. The HTTP routes over them are in
studio/engine/router.py.

Where it does better it stays inside the contract: `progress` follows the denoising steps, a job is
`queued` until it really starts, and DELETE stops a running job at its next step. Beyond the contract (the
studio's extension, docs/compatibility.md): a job's events, and its latest preview as an image.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from prometheus_client import generate_latest
from pydantic import ValidationError

from studio.engine.events import job_events
from studio.engine.generation_types import GenerationParams
from studio.engine.guard import TextGuard
from studio.engine.jobs import Job, JobManager
from studio.engine.previews import PreviewImage
from studio.engine.send_order import parse_order
from studio.engine.step_cache import StepCacheMode, StepCachePolicy
from studio.engine.warmup import Warmup
from studio.protocol import (
    DEFAULT_QUALITY,
    RANDOM_SEED_BOUND,
    EngineExtraParams,
    ErrorResponse,
    JobDeleted,
    JobList,
    JobRecord,
    JobStatus,
    VideoRequest,
)
from studio.tiers import round_frames

# vLLM-Omni waits the abort timeout (2 s) plus 2 s before it answers DELETE with 409.
DELETE_WAIT_S = 4.0


class ApiError(Exception):
    """An answer in vLLM's error envelope."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    @classmethod
    def invalid_request(cls, exc: ValidationError) -> ApiError:
        error = ErrorResponse.invalid_request(exc).error
        return cls(error.code, error.message, error.param)


@dataclass
class EngineState:
    manager: JobManager
    guard: TextGuard | None
    model_name: str
    model_root: str
    api_key: str | None
    started_at: float
    default_steps: int
    default_guidance: float
    sync_timeout_s: float
    healthy: bool = True
    warmup: Warmup | None = None  # a warm-up that may still run while serving (its state is in /health)
    step_cache: StepCachePolicy = field(default_factory=StepCachePolicy)  # the server's; a request may pick its own
    step_cache_possible: bool = False  # the pipeline runs through the engine's own loop, where a step cache works


@dataclass
class ParsedForm:
    request: VideoRequest
    params: GenerationParams
    guardrails: bool
    size_sent: str | None  # the record shows the size field only as sent, as vLLM-Omni's does
    previews: bool = True  # extra_params.previews
    refusal: str | None = None  # why the job fails at once, with 400 (a LoRA adapter: the engine serves none)


def parse_video_form(form: Mapping[str, Any], state: EngineState) -> ParsedForm:
    """Validate a POST /v1/videos form into the contract's request, then into generation parameters."""
    values = VideoRequest.form_values(form)
    try:
        request = VideoRequest.model_validate(values)
    except ValidationError as exc:
        raise ApiError.invalid_request(exc) from None
    if request.model is not None and request.model != state.model_name:
        raise ApiError(
            400,
            f"Model mismatch: request specifies {request.model!r} but server is running {state.model_name!r}.",
            "model",
        )
    if form.get("file_id"):
        raise ApiError(400, "file_id references are not supported", "body.file_id")
    if request.has_reference:
        raise ApiError(400, "this model is text-to-video only: image and video references are not supported")

    # vLLM-Omni hands every extra key to its pipeline; the engine takes only the keys it lists, within bounds.
    try:
        extra = EngineExtraParams.of_request(request.extra_params)
    except ValidationError as exc:
        raise ApiError.invalid_request(exc) from None
    # Rounded up to 4k+1 as the temporal VAE needs (as Cosmos 3 does); the finished record counts the output.
    num_frames = round_frames(request.requested_frames)
    params = GenerationParams(
        prompt=request.prompt,
        negative_prompt=request.negative_prompt,
        width=request.width,
        height=request.height,
        num_frames=num_frames,
        num_inference_steps=request.num_inference_steps or state.default_steps,
        guidance_scale=state.default_guidance if request.guidance_scale is None else request.guidance_scale,
        seed=secrets.randbelow(RANDOM_SEED_BOUND) if request.seed is None else request.seed,
        flow_shift=request.flow_shift,
        extra=extra.pipeline_params(),
        step_cache=request_step_cache(extra.step_cache, state),
    )
    return ParsedForm(
        request=request,
        params=params,
        guardrails=extra.guardrails,
        size_sent=values.get("size"),
        previews=extra.previews,
        refusal=lora_refusal(request.lora),
    )


# The keys vLLM-Omni reads an adapter's name and path from, in its order.
LORA_NAME_KEYS = ("name", "lora_name", "adapter")
LORA_PATH_KEYS = ("local_path", "path", "lora_path", "lora_local_path")


def lora_refusal(lora: Mapping[str, Any] | None) -> str | None:
    """Why a request's `lora` fails it, or None where it sent none. vLLM-Omni takes the job and fails it with 400
    where the object lacks a name or a path, or the adapter cannot be loaded; the engine serves no adapters, so
    every `lora` fails the same way."""
    if lora is None:
        return None
    name = next((lora[key] for key in LORA_NAME_KEYS if lora.get(key)), None)
    path = next((lora[key] for key in LORA_PATH_KEYS if lora.get(key)), None)
    if not name or not path:
        return "Invalid lora object: both name and path are required."
    return f"LoRA adapter {str(name)!r} is not available: this engine serves no LoRA adapters."


def request_step_cache(asked: str | None, state: EngineState) -> StepCachePolicy:
    """The step cache a request runs with: the server's, or the one its extra_params name (with the server's
    interval and bounds). A 400 where it asks for one the pipeline cannot run."""
    if asked is None:
        return state.step_cache
    policy = replace(state.step_cache, mode=StepCacheMode(asked))
    if policy.active and not state.step_cache_possible:
        raise ApiError(
            400,
            f"extra_params.step_cache: {state.model_name} runs through its pipeline's own call, which has no step "
            "cache (only Wan pipelines, on the engine's own denoising loop, have one)",
            "body.extra_params.step_cache",
        )
    return policy


class RecordAnswer(NamedTuple):
    """A job record and the status it is answered with (a job refused or failed is answered with its error's code,
    its record as the body, as vLLM-Omni does)."""

    record: JobRecord
    status: int = 200


class VideoServing:
    """What the routes do: the jobs of one engine, its model, guardrails and limits."""

    def __init__(self, state: EngineState):
        self.state = state

    @property
    def manager(self) -> JobManager:
        return self.state.manager

    @property
    def model_name(self) -> str:
        return self.state.model_name

    def create_video(self, form: Mapping[str, Any], order: str | None) -> RecordAnswer:
        """POST /v1/videos: the job queued (or refused by the guardrails, with its record), placed by its client's
        send order where it gave one."""
        parsed = parse_video_form(form, self.state)
        job = self._new_job(parsed, order)
        refused = parsed.refusal or self._blocked(parsed)
        if refused is not None:
            self.manager.fail_now(job, 400, refused)
            return RecordAnswer(job.record(), 400)
        return RecordAnswer(self.manager.submit(job).record())

    async def create_video_sync(self, form: Mapping[str, Any]) -> tuple[Job, bytes]:
        """POST /v1/videos/sync: the finished job and its mp4, once made (a 504 past the sync timeout). The job is
        forgotten once answered."""
        parsed = parse_video_form(form, self.state)
        refused = parsed.refusal or self._blocked(parsed)
        if refused is not None:
            raise ApiError(400, refused)
        job = self._new_job(parsed, job_id=f"video_sync-{secrets.token_hex(8)}", listed=False)
        job.previews_wanted = False  # its id is told only with its video: nobody could ask for them
        job = self.manager.submit(job)
        timeout_s = self.state.sync_timeout_s
        finished = await asyncio.to_thread(job.done.wait, timeout_s)
        if not finished:
            self.manager.cancel(job.id, wait_s=0)
            raise ApiError(504, f"Video generation timed out after {timeout_s}s.")
        try:
            if job.status is not JobStatus.COMPLETED or job.file_path is None:
                error = job.error or {"code": 500, "message": "generation failed"}
                raise ApiError(int(error.get("code") or 500), str(error.get("message")))
            body = await asyncio.to_thread(job.file_path.read_bytes)
        finally:
            self.manager.forget(job.id)
        return job, body

    def list_videos(self, after: str | None, limit: int | None, order: str) -> JobList:
        if limit is not None and not 0 <= limit <= 100:
            raise ApiError(400, "limit must be between 0 and 100", "query.limit")
        if order not in ("asc", "desc"):
            raise ApiError(400, "order must be asc or desc", "query.order")
        jobs, has_more = self.manager.list(after, limit, order)
        return JobList.page((job.record() for job in jobs), has_more)

    def retrieve_video(self, video_id: str) -> RecordAnswer:
        job = self._job(video_id)
        # A failed job is answered with its error's code, as vLLM-Omni does.
        status = int((job.error or {}).get("code") or 500) if job.status is JobStatus.FAILED else 200
        return RecordAnswer(job.record(), status)

    def video_events(self, video_id: str) -> AsyncIterator[bytes]:
        """The job's events as server-sent events. A plain method, not a generator: an unknown job is a 404 before
        the stream begins."""
        job = self._job(video_id)
        return job_events(job.id, self.manager.watch, job.progress_event, job.record, lambda: job.preview)

    def video_preview(self, video_id: str) -> PreviewImage | None:
        """The job's latest preview; None while it has none (queued, not yet made, or previews off)."""
        return self._job(video_id).preview

    def video_content(self, video_id: str) -> Job:
        """The completed job, whose file is the video (a 422 where it failed, a 404 while it runs)."""
        job = self._job(video_id)
        if job.status is JobStatus.FAILED:
            raise ApiError(422, "Video generation failed. Check job status for error details.")
        if job.status is not JobStatus.COMPLETED or job.file_path is None:
            raise ApiError(404, "Generation is still in-progress")
        return job

    async def delete_video(self, video_id: str) -> JobDeleted:
        """Cancel the job (a running one stops at its next step) and delete it; a 409 where it has not stopped
        within DELETE_WAIT_S."""
        self._job(video_id)
        stopped = await asyncio.to_thread(self.manager.cancel, video_id, DELETE_WAIT_S)
        if not stopped:
            raise ApiError(409, "Cancellation in progress. Please try again later.")
        return JobDeleted(id=video_id)

    def health(self) -> tuple[dict[str, Any], int]:
        """The health body and its status: 503 once unhealthy; the warm-up's state while one exists."""
        if not self.state.healthy:
            return {"status": "unhealthy"}, 503
        body: dict[str, Any] = {"status": "healthy"}
        if self.state.warmup is not None:
            body["warmup"] = self.state.warmup.status()
        return body, 200

    def models(self) -> dict[str, Any]:
        """GET /v1/models: the one model served, in OpenAI's model list."""
        return {
            "object": "list",
            "data": [
                {
                    "id": self.state.model_name,
                    "object": "model",
                    "created": int(self.state.started_at),
                    "owned_by": "omni-studio",
                    "root": self.state.model_root,
                    "parent": None,
                    "max_model_len": None,
                    "permission": [],
                }
            ],
        }

    def metrics(self) -> bytes:
        """The engine's Prometheus metrics, in the text exposition format."""
        return generate_latest(self.manager.metrics.registry)

    def _job(self, video_id: str) -> Job:
        job = self.manager.get(video_id)
        if job is None:
            raise ApiError(404, "Video not found")
        return job

    def _blocked(self, parsed: ParsedForm) -> str | None:
        """The guardrails' refusal of the prompt, where they are on for this request; None where it may run."""
        if self.state.guard is not None and parsed.guardrails:
            verdict = self.state.guard.check(parsed.params.prompt)
            if not verdict.allowed:
                return verdict.message
        return None

    def _new_job(self, parsed: ParsedForm, order: str | None = None, **options: Any) -> Job:
        job = self.manager.new_job(parsed.params, parsed.request.output_fps, **options)
        job.place = parse_order(order)
        request = parsed.request
        job.size_field, job.seconds_field = parsed.size_sent, request.seconds
        job.requested_frames = request.sent_frames
        job.quality = request.quality or DEFAULT_QUALITY
        job.metrics_wanted = bool(request.return_stage_metrics)
        job.previews_wanted = parsed.previews
        return job
