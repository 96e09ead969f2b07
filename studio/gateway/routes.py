"""The gateway's routes: vLLM-Omni's video API (docs/gateway.md), each a few lines over VideoGateway (serving.py).

Every route asks who calls first (callers.py: a key, or the local operator of a studio without sign-in); every
error comes in the contract's envelope, {"error": {"message", "type", "param", "code"}} (protocol.ErrorResponse),
validation as 400, as vLLM-Omni's full server answers.
"""

# Without `from __future__ import annotations`: FastAPI reads each route's parameters from their annotations, and
# `Caller`, made inside build_gateway, cannot be found again from text.
import asyncio
import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.types import Scope

from studio.backend.face import Visitor
from studio.gateway.callers import CallerRefused, GatewayAccess
from studio.gateway.forms import FormProblem
from studio.gateway.mount import PREFIX
from studio.gateway.records import MEDIA_TYPE, http_status
from studio.gateway.serving import DEFAULT_PAGE, GatewayProblem, Upload, VideoGateway
from studio.protocol import ErrorResponse, JobRecord

MAX_FORM_FIELDS = 64  # the contract has about 25; unknown ones are dropped
POLL_AFTER_MS = "500"  # the openai SDK's poll helper waits this long between two reads of a record


def envelope(status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None):
    body = ErrorResponse.of(status, message, param).model_dump(mode="json")
    return JSONResponse(body, status_code=status, headers=headers)


def record_response(record: JobRecord) -> JSONResponse:
    """A record, with a failed job's own status (vLLM-Omni's: 400 for a guardrail block, 500 for an engine error)."""
    headers = {"openai-poll-after-ms": POLL_AFTER_MS}
    return JSONResponse(record.model_dump(mode="json"), status_code=http_status(record), headers=headers)


async def read_form(request: Request) -> tuple[dict[str, Any], Upload | None]:
    """The multipart form's text fields, and input_reference's file where one is sent; a JSON body is refused."""
    if not request.headers.get("content-type", "").startswith(("multipart/form-data", "application/x-www-form")):
        raise GatewayProblem(400, "POST /v1/videos takes multipart/form-data (a JSON body is not read)")
    form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    reference = form.get("input_reference")
    upload = None
    if isinstance(reference, UploadFile):
        upload = Upload(reference.filename or "image", await reference.read())
    elif reference not in (None, ""):
        raise GatewayProblem(400, "input_reference is an image file sent as a file part", "body.input_reference")
    fields = {name: value for name, value in form.items() if isinstance(value, str)}
    await form.close()
    return fields, upload


def build_gateway(
    gateway: VideoGateway,
    access: GatewayAccess,
    address_of: Callable[[Scope], str],
    cross_site: Callable[[Scope], bool],
) -> FastAPI:
    """The gateway's app. `address_of`: the client address as the page's limits read it (ui/client_address.py);
    `cross_site`: whether a browser says the request comes from another site (ui/same_origin.py)."""
    app = FastAPI(title="Omni Studio video API", docs_url=None, redoc_url=None, openapi_url=None)
    started = int(time.time())

    @app.exception_handler(GatewayProblem)
    async def _problem(request: Request, exc: GatewayProblem) -> JSONResponse:
        return envelope(exc.status, exc.message, exc.param, exc.headers)

    @app.exception_handler(FormProblem)
    async def _form(request: Request, exc: FormProblem) -> JSONResponse:
        return envelope(exc.status, exc.message, exc.param)

    @app.exception_handler(CallerRefused)
    async def _refused(request: Request, exc: CallerRefused) -> JSONResponse:
        return envelope(exc.status, exc.message, None, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problem = exc.errors()[0]
        where = [str(part) for part in problem.get("loc", ()) if part not in ("query", "path", "body")]
        param = ".".join(where) or None
        return envelope(400, f"{param}: {problem.get('msg')}" if param else str(problem.get("msg")), param)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return envelope(exc.status_code, str(exc.detail), None, dict(exc.headers or {}))

    def caller(request: Request) -> Visitor:
        return access.caller(
            request.headers.get("authorization"),
            address_of(request.scope),
            host=request.headers.get("host", ""),
            cross_site=cross_site(request.scope),
        )

    Caller = Annotated[Visitor, Depends(caller)]

    @app.get(f"{PREFIX}/models")
    async def models(visitor: Caller) -> dict[str, Any]:
        entry = {"id": gateway.model_name, "object": "model", "created": started, "owned_by": "omni-studio"}
        return {"object": "list", "data": [entry]}

    @app.post(f"{PREFIX}/videos")
    async def create(request: Request, visitor: Caller) -> JSONResponse:
        fields, upload = await read_form(request)
        view = await gateway.create(fields, upload, visitor)
        return record_response(gateway.retrieve(view.id, visitor))

    @app.post(f"{PREFIX}/videos/sync")
    async def create_sync(request: Request, visitor: Caller) -> FileResponse:
        fields, upload = await read_form(request)
        view, record = await gateway.sync(fields, upload, visitor, request.is_disconnected)
        headers = {
            "X-Request-Id": view.id,
            "X-Model": record.model or gateway.model_name,
            "X-Inference-Time-S": f"{record.inference_time_s or 0:.3f}",
            "X-Stage-Durations": json.dumps(record.stage_durations or {}),
            "X-Peak-Memory-MB": f"{record.peak_memory_mb or 0:.1f}",
        }
        return FileResponse(view.video_path, media_type=MEDIA_TYPE, headers=headers)

    @app.get(f"{PREFIX}/videos")
    async def listing(
        visitor: Caller,
        after: str | None = None,
        limit: Annotated[int, Query()] = DEFAULT_PAGE,
        order: Literal["asc", "desc"] = "desc",
    ) -> dict[str, Any]:
        page = await _in_thread(gateway.page, visitor, after, limit, order)
        return page.model_dump(mode="json")

    @app.get(f"{PREFIX}/videos/{{video_id}}")
    async def retrieve(video_id: str, visitor: Caller) -> JSONResponse:
        return record_response(await _in_thread(gateway.retrieve, video_id, visitor))

    @app.get(f"{PREFIX}/videos/{{video_id}}/content")
    async def content(video_id: str, visitor: Caller, variant: str = "video") -> FileResponse:
        if variant != "video":
            raise GatewayProblem(400, f"variant: the studio serves the video alone, not {variant[:40]!r}", "variant")
        path = await _in_thread(gateway.content, video_id, visitor)
        return FileResponse(path, media_type=MEDIA_TYPE, filename=path.name)

    @app.delete(f"{PREFIX}/videos/{{video_id}}")
    async def delete(video_id: str, visitor: Caller) -> dict[str, Any]:
        return (await gateway.delete(video_id, visitor)).model_dump(mode="json")

    return app


async def _in_thread(work: Callable[..., Any], *args: Any) -> Any:
    """History's reads off the event loop, where the runs are."""
    return await asyncio.to_thread(work, *args)
