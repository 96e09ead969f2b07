"""The embedded engine's HTTP app, mirroring vLLM-Omni's video API: its routes (studio/engine/router.py) over the
engine's operations (studio/engine/serving.py), the API key, and every error as vLLM's error envelope
(studio.protocol) with the same status codes as `vllm serve --omni`.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from studio.engine.router import answer, router
from studio.engine.serving import ApiError, EngineState, VideoServing
from studio.protocol import ErrorResponse


def error_answer(status: int, message: str, param: str | None = None) -> Response:
    """An answer in vLLM's error envelope."""
    return answer(ErrorResponse.of(status, message, param), status)


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


async def _api_error(_: Request, exc: ApiError) -> Response:
    return error_answer(exc.status, exc.message, exc.param)


async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
    # A query or path value FastAPI could not read: a 400 that names each field.
    message = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors())
    return error_answer(400, message)


async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
    return error_answer(exc.status_code, str(exc.detail))


def create_app(state: EngineState) -> FastAPI:
    """The engine's app over `state`; the caller starts and stops its job manager."""
    app = FastAPI(title="Omni Studio engine", version="1", docs_url=None, redoc_url=None)
    app.state.serving = VideoServing(state)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    if state.api_key:
        app.add_middleware(BearerKeyMiddleware, key=state.api_key)
    app.include_router(router)
    return app
