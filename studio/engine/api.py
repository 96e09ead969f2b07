"""HTTP routes of the embedded engine, mirroring vLLM-Omni's video API (shared contract: the same form
fields, validation, status codes, job record and error envelope as `vllm serve --omni`).

Where it does better it stays inside the contract: `progress` follows the denoising steps, a job is
`queued` until it really starts, and DELETE stops a running job at its next step.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from studio.engine.guard import TextGuard
from studio.engine.jobs import Job, JobManager
from studio.engine.pipeline import GenerationParams
from studio.protocol import MAX_PROMPT_CHARS

SIZE_PATTERN = re.compile(r"^\d+x\d+$")
SECONDS_PATTERN = re.compile(r"^[1-9]\d*$")
DEFAULT_FPS = 24
DEFAULT_SECONDS = 4  # OpenAI's videos API default, used when neither num_frames nor seconds is sent
MAX_SIDE = 4096
MAX_FRAMES = 1025


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's error envelope; `type` is the HTTP reason phrase, as vLLM renders an HTTPException."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"error": {"message": message, "type": phrase, "param": param, "code": status}}


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


def _form_text(form: Any, name: str) -> str | None:
    value = form.get(name)
    if value is None or isinstance(value, UploadFile):
        return None
    text = str(value)
    return text if text != "" else None


def _number(form: Any, name: str, kind: type, low: float | None = None, high: float | None = None) -> Any:
    text = _form_text(form, name)
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        kind_text = "an integer" if kind is int else "a number"
        raise ApiError(400, f"{name} must be {kind_text}, got {text[:50]!r}", f"body.{name}") from None
    if kind is float and value != value:  # NaN
        raise ApiError(400, f"{name} must be a number, got {text[:50]!r}", f"body.{name}")
    if low is not None and value < low:
        raise ApiError(400, f"{name} must be >= {low}, got {value}", f"body.{name}")
    if high is not None and value > high:
        raise ApiError(400, f"{name} must be <= {high}, got {value}", f"body.{name}")
    return value


def _boolean(form: Any, name: str) -> bool | None:
    text = _form_text(form, name)
    if text is None:
        return None
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ApiError(400, f"{name} must be true or false, got {text[:50]!r}", f"body.{name}")


@dataclass
class ParsedForm:
    params: GenerationParams
    fps: int
    guardrails: bool
    size_field: str | None
    seconds_field: str | None
    requested_frames: int


def parse_video_form(form: Any, state: EngineState) -> ParsedForm:
    """Validate a POST /v1/videos form into generation parameters, with vLLM-Omni's rules and messages."""
    prompt = _form_text(form, "prompt")
    if prompt is None or not prompt.strip():
        raise ApiError(400, "prompt is required", "body.prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ApiError(400, f"prompt is too long ({len(prompt)} characters; at most {MAX_PROMPT_CHARS})", "body.prompt")
    if "\x00" in prompt:
        raise ApiError(400, "prompt may not contain NUL characters", "body.prompt")
    model = _form_text(form, "model")
    if model is not None and model != state.model_name:
        raise ApiError(
            400,
            f"Model mismatch: request specifies {model!r} but server is running {state.model_name!r}.",
            "model",
        )

    size = _form_text(form, "size")
    width = _number(form, "width", int, 1)
    height = _number(form, "height", int, 1)
    if size is not None:
        if not SIZE_PATTERN.match(size):
            raise ApiError(400, f"size must look like WIDTHxHEIGHT (e.g. 832x480), got {size[:50]!r}", "body.size")
        width, height = (int(part) for part in size.split("x"))
    if width is None or height is None:
        width, height = width or 832, height or 480
    if not (16 <= width <= MAX_SIDE and 16 <= height <= MAX_SIDE):
        raise ApiError(400, f"width and height must be between 16 and {MAX_SIDE}, got {width}x{height}", "body.size")

    fps = _number(form, "fps", int, 1, 120) or DEFAULT_FPS
    num_frames = _number(form, "num_frames", int, 1, MAX_FRAMES)
    seconds = _form_text(form, "seconds")
    if seconds is not None and not SECONDS_PATTERN.match(seconds):
        raise ApiError(400, f"seconds must be a positive whole number, got {seconds[:50]!r}", "body.seconds")
    if num_frames is None:
        num_frames = int(seconds or DEFAULT_SECONDS) * fps
        if num_frames > MAX_FRAMES:
            raise ApiError(400, f"seconds x fps gives {num_frames} frames; at most {MAX_FRAMES}", "body.seconds")
    steps = _number(form, "num_inference_steps", int, 1, 200) or state.default_steps
    guidance = _number(form, "guidance_scale", float, 0, 20)
    flow_shift = _number(form, "flow_shift", float, 0, 100)
    seed = _number(form, "seed", int, 0, 2**63 - 1)
    _boolean(form, "generate_sound")
    _number(form, "sound_duration", float, 0)
    for name in ("guidance_scale_2", "true_cfg_scale", "boundary_ratio"):
        _number(form, name, float)

    extra: dict[str, Any] = {}
    raw_extra = _form_text(form, "extra_params")
    if raw_extra is not None:
        try:
            extra = json.loads(raw_extra)
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON in form field: extra_params is not valid JSON ({exc}).") from exc
        if not isinstance(extra, dict):
            raise ApiError(
                400,
                f"Invalid JSON in form field: expected dict, got {type(extra).__name__}. "
                "extra_params must be a JSON object.",
            )

    has_upload = isinstance(form.get("input_reference"), UploadFile)
    if has_upload and (_form_text(form, "image_reference") or _form_text(form, "video_reference")):
        raise ApiError(400, "input_reference cannot be combined with image_reference or video_reference")
    if _form_text(form, "file_id") is not None:
        raise ApiError(400, "file_id references are not supported", "body.file_id")
    if has_upload or _form_text(form, "image_reference") or _form_text(form, "video_reference"):
        raise ApiError(400, "this model is text-to-video only: image and video references are not supported")

    guardrails = extra.pop("guardrails", True)
    if not isinstance(guardrails, bool):
        raise ApiError(400, "extra_params.guardrails must be true or false", "body.extra_params")
    requested_frames = num_frames
    # Rounded up to 4k+1 as the temporal VAE needs (as Cosmos 3 does); the finished record counts the output.
    if (num_frames - 1) % 4:
        num_frames += 4 - (num_frames - 1) % 4
    params = GenerationParams(
        prompt=prompt,
        negative_prompt=_form_text(form, "negative_prompt"),
        width=width,
        height=height,
        num_frames=num_frames,
        num_inference_steps=steps,
        guidance_scale=state.default_guidance if guidance is None else guidance,
        seed=secrets.randbelow(2**32) if seed is None else seed,
        flow_shift=flow_shift,
        extra=extra,
    )
    return ParsedForm(
        params=params,
        fps=fps,
        guardrails=guardrails,
        size_field=size,
        seconds_field=seconds,
        requested_frames=requested_frames,
    )


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
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.message, exc.param), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors())
        return JSONResponse(error_body(400, message), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code)

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

    @app.post("/v1/videos")
    async def create_video(request: Request) -> JSONResponse:
        form = await read_form(request)
        parsed = parse_video_form(form, state)
        job = state.manager.new_job(parsed.params, parsed.fps)
        job.size_field, job.seconds_field = parsed.size_field, parsed.seconds_field
        job.requested_frames = parsed.requested_frames
        blocked = admit(parsed)
        if blocked is not None:
            state.manager.fail_now(job, 400, blocked)
            return JSONResponse(job.record(), status_code=400)
        return JSONResponse(state.manager.submit(job).record())

    @app.post("/v1/videos/sync")
    async def create_video_sync(request: Request) -> Response:
        form = await read_form(request)
        parsed = parse_video_form(form, state)
        blocked = admit(parsed)
        if blocked is not None:
            raise ApiError(400, blocked)
        sync_id = f"video_sync-{secrets.token_hex(8)}"
        job = state.manager.submit(state.manager.new_job(parsed.params, parsed.fps, job_id=sync_id, listed=False))
        finished = await asyncio.to_thread(job.done.wait, state.sync_timeout_s)
        if not finished:
            state.manager.cancel(job.id, wait_s=0)
            raise ApiError(504, f"Video generation timed out after {state.sync_timeout_s}s.")
        try:
            if job.status != "completed" or job.file_path is None:
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
    async def list_videos(after: str | None = None, limit: int | None = None, order: str = "desc") -> JSONResponse:
        if limit is not None and not 0 <= limit <= 100:
            raise ApiError(400, "limit must be between 0 and 100", "query.limit")
        if order not in ("asc", "desc"):
            raise ApiError(400, "order must be asc or desc", "query.order")
        jobs, has_more = state.manager.list(after, limit, order)
        data = [job.record() for job in jobs]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": has_more,
            }
        )

    def job_or_404(video_id: str) -> Job:
        job = state.manager.get(video_id)
        if job is None:
            raise ApiError(404, "Video not found")
        return job

    @app.get("/v1/videos/{video_id}")
    async def retrieve_video(video_id: str) -> JSONResponse:
        job = job_or_404(video_id)
        status = int((job.error or {}).get("code") or 500) if job.status == "failed" else 200
        return JSONResponse(job.record(), status_code=status)

    @app.get("/v1/videos/{video_id}/content")
    async def video_content(video_id: str) -> Response:
        job = job_or_404(video_id)
        if job.status == "failed":
            raise ApiError(422, "Video generation failed. Check job status for error details.")
        if job.status != "completed" or job.file_path is None:
            raise ApiError(404, "Generation is still in-progress")
        return FileResponse(job.file_path, media_type="video/mp4", filename=f"{job.id}.mp4")

    @app.delete("/v1/videos/{video_id}")
    async def delete_video(video_id: str) -> JSONResponse:
        job_or_404(video_id)
        # vLLM-Omni waits the abort timeout (2 s) plus 2 s before it answers 409.
        stopped = await asyncio.to_thread(state.manager.cancel, video_id, 4.0)
        if not stopped:
            raise ApiError(409, "Cancellation in progress. Please try again later.")
        return JSONResponse({"id": video_id, "deleted": True, "object": "video.deleted"})

    @app.get("/health")
    async def health() -> JSONResponse:
        if not state.healthy:
            return JSONResponse({"status": "unhealthy"}, status_code=503)
        return JSONResponse({"status": "healthy"})

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
