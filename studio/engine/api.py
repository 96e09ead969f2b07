"""HTTP routes of the embedded engine, mirroring vLLM-Omni's video API: the form is validated into the contract's
request (studio.protocol), and the answers are the contract's job record, list, deletion and error envelope, with
the same status codes and `param` values as `vllm serve --omni`.

Where it does better it stays inside the contract: `progress` follows the denoising steps, a job is
`queued` until it really starts, and DELETE stops a running job at its next step. Beyond the contract (the
studio's extension, docs/compatibility.md): a job's events, and its latest preview as an image.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from studio.engine.events import job_events
from studio.engine.generation_types import GenerationParams
from studio.engine.guard import TextGuard
from studio.engine.jobs import Job, JobManager
from studio.engine.send_order import parse_order
from studio.engine.step_cache import StepCacheMode, StepCachePolicy
from studio.engine.warmup import Warmup
from studio.protocol import (
    EVENTS_MEDIA_TYPE,
    ORDER_HEADER,
    PREVIEW_STEP_HEADER,
    PREVIEW_TOTAL_STEPS_HEADER,
    RANDOM_SEED_BOUND,
    EngineExtraParams,
    ErrorResponse,
    JobDeleted,
    JobList,
    JobStatus,
    VideoRequest,
)
from studio.tiers import round_frames


class ApiError(Exception):
    """An answer in vLLM's error envelope."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    @classmethod
    def invalid_request(cls, exc: ValidationError) -> ApiError:
        error = ErrorResponse.invalid_request(exc).error
        return cls(error.code, error.message, error.param)

    def response(self) -> Response:
        return answer(ErrorResponse.of(self.status, self.message, self.param), self.status)


def answer(body: BaseModel, status: int = 200) -> Response:
    """A contract model as the JSON body of a response."""
    return Response(body.model_dump_json(), status_code=status, media_type="application/json")


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
    )


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


class BearerKeyMiddleware:
    """Every /v1 route needs `Authorization: Bearer KEY` (as vLLM's --api-key); /health and /metrics do not.

    A plain ASGI middleware: it reads only the headers and leaves the request body to the route.
    """

    def __init__(self, app: Any, key: str):
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not secrets.compare_digest(header, self.expected):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(state: EngineState) -> FastAPI:
    app = FastAPI(title="Omni Studio engine", version="1", docs_url=None, redoc_url=None)
    app.state.engine = state

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> Response:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        message = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors())
        return ApiError(400, message).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        return ApiError(exc.status_code, str(exc.detail)).response()

    if state.api_key:
        app.add_middleware(BearerKeyMiddleware, key=state.api_key)

    async def read_form(request: Request) -> Any:
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
            raise ApiError(
                400,
                "POST /v1/videos takes multipart/form-data, not a JSON body; "
                "send the fields as form fields (extra_params as a JSON string)",
                "body.prompt",
            )
        try:
            return await request.form()
        except Exception as exc:
            raise ApiError(400, f"cannot read the form: {exc}") from exc

    def admit(parsed: ParsedForm) -> str | None:
        if state.guard is not None and parsed.guardrails:
            verdict = state.guard.check(parsed.params.prompt)
            if not verdict.allowed:
                return verdict.message
        return None

    def new_job(parsed: ParsedForm, order: str | None = None, **options: Any) -> Job:
        job = state.manager.new_job(parsed.params, parsed.request.output_fps, **options)
        job.place = parse_order(order)
        job.size_field, job.seconds_field = parsed.size_sent, parsed.request.seconds
        job.requested_frames = parsed.request.requested_frames
        job.previews_wanted = parsed.previews
        return job

    @app.post("/v1/videos")
    async def create_video(request: Request) -> Response:
        parsed = parse_video_form(await read_form(request), state)
        job = new_job(parsed, request.headers.get(ORDER_HEADER))
        blocked = admit(parsed)
        if blocked is not None:
            state.manager.fail_now(job, 400, blocked)
            return answer(job.record(), 400)
        return answer(state.manager.submit(job).record())

    @app.post("/v1/videos/sync")
    async def create_video_sync(request: Request) -> Response:
        parsed = parse_video_form(await read_form(request), state)
        blocked = admit(parsed)
        if blocked is not None:
            raise ApiError(400, blocked)
        job = new_job(parsed, job_id=f"video_sync-{secrets.token_hex(8)}", listed=False)
        job.previews_wanted = False  # its id is told only with its video: nobody could ask for them
        job = state.manager.submit(job)
        finished = await asyncio.to_thread(job.done.wait, state.sync_timeout_s)
        if not finished:
            state.manager.cancel(job.id, wait_s=0)
            raise ApiError(504, f"Video generation timed out after {state.sync_timeout_s}s.")
        try:
            if job.status is not JobStatus.COMPLETED or job.file_path is None:
                error = job.error or {"code": 500, "message": "generation failed"}
                raise ApiError(int(error.get("code") or 500), str(error.get("message")))
            body = await asyncio.to_thread(job.file_path.read_bytes)
        finally:
            state.manager.forget(job.id)
        headers = {
            "X-Request-Id": job.id,
            "X-Model": state.model_name,
            "X-Inference-Time-S": f"{job.inference_time_s or 0:.4f}",
            "X-Stage-Durations": json.dumps(job.stage_durations or {}),
            "X-Peak-Memory-MB": f"{job.peak_memory_mb or 0:.1f}",
        }
        return Response(content=body, media_type="video/mp4", headers=headers)

    @app.get("/v1/videos")
    async def list_videos(after: str | None = None, limit: int | None = None, order: str = "desc") -> Response:
        if limit is not None and not 0 <= limit <= 100:
            raise ApiError(400, "limit must be between 0 and 100", "query.limit")
        if order not in ("asc", "desc"):
            raise ApiError(400, "order must be asc or desc", "query.order")
        jobs, has_more = state.manager.list(after, limit, order)
        return answer(JobList.page((job.record() for job in jobs), has_more))

    def job_or_404(video_id: str) -> Job:
        job = state.manager.get(video_id)
        if job is None:
            raise ApiError(404, "Video not found")
        return job

    @app.get("/v1/videos/{video_id}")
    async def retrieve_video(video_id: str) -> Response:
        job = job_or_404(video_id)
        # A failed job is answered with its error's code, as vLLM-Omni does.
        status = int((job.error or {}).get("code") or 500) if job.status is JobStatus.FAILED else 200
        return answer(job.record(), status)

    @app.get("/v1/videos/{video_id}/events")
    async def video_events(video_id: str) -> Response:
        """The job's progress at each step, its previews and its record at each change of state, as server-sent
        events (the studio's extension: docs/compatibility.md); the stream ends once the job has finished."""
        job = job_or_404(video_id)
        events = job_events(job.id, state.manager.watch, job.progress_event, job.record, lambda: job.preview)
        # No caching and no proxy buffering: each event is worth its moment.
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(events, media_type=EVENTS_MEDIA_TYPE, headers=headers)

    @app.get("/v1/videos/{video_id}/preview")
    async def video_preview(video_id: str, request: Request) -> Response:
        """The job's latest preview as an image, with the step it shows (the studio's extension:
        docs/compatibility.md); 204 while it has none (queued, not yet made, or previews off)."""
        preview = job_or_404(video_id).preview
        if preview is None:
            return Response(status_code=204, headers={"Cache-Control": "no-cache"})
        tag = f'"{video_id}-{preview.step}"'
        headers = {
            PREVIEW_STEP_HEADER: str(preview.step),
            PREVIEW_TOTAL_STEPS_HEADER: str(preview.total_steps),
            "ETag": tag,
            "Cache-Control": "no-cache",  # a client may ask again with If-None-Match
        }
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers=headers)
        return Response(preview.data, media_type=preview.media_type, headers=headers)

    @app.get("/v1/videos/{video_id}/content")
    async def video_content(video_id: str) -> Response:
        job = job_or_404(video_id)
        if job.status is JobStatus.FAILED:
            raise ApiError(422, "Video generation failed. Check job status for error details.")
        if job.status is not JobStatus.COMPLETED or job.file_path is None:
            raise ApiError(404, "Generation is still in-progress")
        return FileResponse(job.file_path, media_type="video/mp4", filename=f"{job.id}.mp4")

    @app.delete("/v1/videos/{video_id}")
    async def delete_video(video_id: str) -> Response:
        job_or_404(video_id)
        # vLLM-Omni waits the abort timeout (2 s) plus 2 s before it answers 409.
        stopped = await asyncio.to_thread(state.manager.cancel, video_id, 4.0)
        if not stopped:
            raise ApiError(409, "Cancellation in progress. Please try again later.")
        return answer(JobDeleted(id=video_id))

    @app.get("/health")
    async def health() -> JSONResponse:
        if not state.healthy:
            return JSONResponse({"status": "unhealthy"}, status_code=503)
        body: dict[str, Any] = {"status": "healthy"}
        if state.warmup is not None:
            body["warmup"] = state.warmup.status()
        return JSONResponse(body)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": state.model_name,
                        "object": "model",
                        "created": int(state.started_at),
                        "owned_by": "omni-studio",
                        "root": state.model_root,
                        "parent": None,
                        "max_model_len": None,
                        "permission": [],
                    }
                ],
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        registry = state.manager.metrics.registry
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
