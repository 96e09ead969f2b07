"""The embedded engine's HTTP routes: each reads its request, calls the engine's operation (studio/engine/serving.py)
and writes the answer as vLLM-Omni's video API does (its status codes, headers and media types). The app they are
mounted on is studio/engine/api.py's."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from studio.engine.jobs import Job
from studio.engine.previews import PreviewImage
from studio.engine.serving import ApiError, VideoServing
from studio.protocol import EVENTS_MEDIA_TYPE, ORDER_HEADER, PREVIEW_STEP_HEADER, PREVIEW_TOTAL_STEPS_HEADER

FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def answer(body: BaseModel, status: int = 200) -> Response:
    """A contract model as the JSON body of a response."""
    return Response(body.model_dump_json(), status_code=status, media_type="application/json")


def video_serving(request: Request) -> VideoServing:
    """The app's serving object, set by create_app."""
    return request.app.state.serving


Serving = Annotated[VideoServing, Depends(video_serving)]
router = APIRouter()


async def read_form(request: Request) -> Any:
    """The request's form: a 400 for a JSON body (the contract takes form fields only) or a form that cannot be
    read. An empty body is an empty form, whose missing prompt the validation names, as vLLM-Omni's does."""
    if request.headers.get("content-length") == "0":
        return {}
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith(FORM_TYPES):
        if not await request.body():  # sent without a length
            return {}
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


def sync_headers(job: Job, model_name: str) -> dict[str, str]:
    """What vLLM-Omni's sync endpoint tells beside the mp4: the request's id, model, time, stages and memory."""
    return {
        "X-Request-Id": job.id,
        "X-Model": model_name,
        "X-Inference-Time-S": f"{job.inference_time_s or 0:.4f}",
        "X-Stage-Durations": json.dumps(job.stage_durations or {}),
        "X-Peak-Memory-MB": f"{job.peak_memory_mb or 0:.1f}",
    }


def preview_response(video_id: str, preview: PreviewImage | None, if_none_match: str | None) -> Response:
    """The preview as an image with the step it shows and an ETag of that step; 204 while there is none, 304 where
    the client holds this step already."""
    if preview is None:
        return Response(status_code=204, headers={"Cache-Control": "no-cache"})
    tag = f'"{video_id}-{preview.step}"'
    headers = {
        PREVIEW_STEP_HEADER: str(preview.step),
        PREVIEW_TOTAL_STEPS_HEADER: str(preview.total_steps),
        "ETag": tag,
        "Cache-Control": "no-cache",  # a client may ask again with If-None-Match
    }
    if if_none_match == tag:
        return Response(status_code=304, headers=headers)
    return Response(preview.data, media_type=preview.media_type, headers=headers)


@router.post("/v1/videos")
async def create_video(request: Request, serving: Serving) -> Response:
    form = await read_form(request)
    return answer(*serving.create_video(form, request.headers.get(ORDER_HEADER)))


@router.post("/v1/videos/sync")
async def create_video_sync(request: Request, serving: Serving) -> Response:
    job, body = await serving.create_video_sync(await read_form(request))
    return Response(content=body, media_type="video/mp4", headers=sync_headers(job, serving.model_name))


@router.get("/v1/videos")
async def list_videos(
    serving: Serving, after: str | None = None, limit: int | None = None, order: str = "desc"
) -> Response:
    return answer(serving.list_videos(after, limit, order))


@router.get("/v1/videos/{video_id}")
async def retrieve_video(video_id: str, serving: Serving) -> Response:
    return answer(*serving.retrieve_video(video_id))


@router.get("/v1/videos/{video_id}/events")
async def video_events(video_id: str, serving: Serving) -> Response:
    """The job's progress at each step, its previews and its record at each change of state, as server-sent
    events (the studio's extension: docs/compatibility.md); the stream ends once the job has finished."""
    events = serving.video_events(video_id)
    # No caching and no proxy buffering: each event is worth its moment.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type=EVENTS_MEDIA_TYPE, headers=headers)


@router.get("/v1/videos/{video_id}/preview")
async def video_preview(video_id: str, request: Request, serving: Serving) -> Response:
    """The job's latest preview as an image, with the step it shows (the studio's extension:
    docs/compatibility.md); 204 while it has none (queued, not yet made, or previews off)."""
    preview = serving.video_preview(video_id)
    return preview_response(video_id, preview, request.headers.get("if-none-match"))


@router.get("/v1/videos/{video_id}/content")
async def video_content(video_id: str, serving: Serving) -> Response:
    job = serving.video_content(video_id)
    return FileResponse(job.file_path, media_type="video/mp4", filename=f"{job.id}.mp4")


@router.delete("/v1/videos/{video_id}")
async def delete_video(video_id: str, serving: Serving) -> Response:
    return answer(await serving.delete_video(video_id))


@router.get("/health")
async def health(serving: Serving) -> JSONResponse:
    body, status = serving.health()
    return JSONResponse(body, status_code=status)


@router.get("/v1/models")
async def models(serving: Serving) -> JSONResponse:
    return JSONResponse(serving.models())


@router.get("/metrics")
async def metrics(serving: Serving) -> Response:
    return Response(serving.metrics(), media_type=CONTENT_TYPE_LATEST)
