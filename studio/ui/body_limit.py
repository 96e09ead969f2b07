"""Bodies too large for what they are sent to, refused before they are read: a guard in front of Gradio's routes.

Gradio reads a call's body whole and parses it before anything checks it: 100 MB in a prompts field took seconds,
stalled every other visitor's calls, and grew the studio by hundreds of MB. Here:
- a call (any route but the upload route) takes at most MAX_CALL_BODY_BYTES: its text fields of up to 64 KB and a
  little for the rest; no field of the studio has a use for more (a prompt is at most MAX_PROMPT_CHARS
  characters; images come by the upload route);
- the upload route, and the gateway's forms (POST /v1/videos, /v1/videos/sync), take at most the page's upload limit
  (and the multipart framing around it);
- a call's JSON body is read (up to that bound) and any one text field over MAX_TEXT_BYTES is refused, named.
A body is refused by its Content-Length before any of it is read; a body sent in chunks without one is counted
as it comes and refused as soon as it passes the bound. The answer is 413 with a JSON `detail` in the studio's
words; what was not read is never read.
"""

from __future__ import annotations

from typing import Any

from gradio.utils import get_function_params
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.gateway.mount import FORM_ROUTES
from studio.protocol import MAX_PROMPT_CHARS
from studio.ui.call_routes import API, BodyTooLarge, CallBody, read_body, route_of, route_path, takes_json_body

MAX_TEXT_BYTES = 64 * 1024
CALL_OVERHEAD_BYTES = 16 * 1024  # the session, the event's name and the form's other fields, with room to spare
MAX_CALL_BODY_BYTES = MAX_TEXT_BYTES + CALL_OVERHEAD_BYTES
UPLOAD_OVERHEAD_BYTES = 64 * 1024  # multipart boundaries and part headers around the file
# Gradio's upload route, and the gateway's forms (an input_reference image among their fields).
UPLOAD_PATHS = (f"{API}/upload", *FORM_ROUTES)
WHY = (
    f"a text field holds at most {MAX_TEXT_BYTES // 1024} KB (a prompts field has no use for more: a prompt is at "
    f"most {MAX_PROMPT_CHARS:,} characters); send fewer or shorter prompts"
)


def too_large(detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=413, headers={"Connection": "close"})


def call_too_large() -> str:
    return f"this call's body is over {MAX_CALL_BODY_BYTES // 1024} KB, more than any call of the studio takes: {WHY}"


def upload_too_large(max_upload_bytes: int) -> str:
    return f"this upload is over {max_upload_bytes // 2**20} MB, the page's upload limit: send a smaller image"


def long_text(value: Any, limit: int = MAX_TEXT_BYTES) -> tuple[list[Any], int] | None:
    """The first string in a JSON value longer than `limit` bytes of UTF-8: (its path of keys and indexes, size)."""
    stack: list[tuple[list[Any], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        # A character is at most 4 bytes of UTF-8: only a string longer than limit/4 needs encoding to know.
        if isinstance(item, str) and len(item) > limit // 4 and (size := len(item.encode("utf-8", "replace"))) > limit:
            return path, size
        if isinstance(item, dict):
            stack.extend(([*path, key], child) for key, child in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend(([*path, index], child) for index, child in reversed(list(enumerate(item))))
    return None


def field_name(scope: Scope, body: CallBody, path: list[Any]) -> str:
    """What the page or the API calls the field at `path` of a call's body: its parameter's name (an API
    endpoint) or its label (a field of the page); else where it is in the body."""
    where = "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in path)
    if len(path) < 2 or path[0] != "data" or not isinstance(path[1], int) or not isinstance(body.parsed, dict):
        return f"the field at {where}"
    try:
        fns = scope["app"].get_blocks().fns
        index = body.parsed.get("fn_index")
        if isinstance(index, int):
            fn = fns[index]
        else:
            name = route_path(scope).rstrip("/").rsplit("/", 1)[-1]
            fn = next(fn for fn in fns.values() if fn.api_name == name)
        component = fn.inputs[path[1]]
        if type(component).__name__ == "Api":  # gr.api: the function's own parameter names
            return f"the {get_function_params(fn.fn)[path[1]][0]} field"
        label = getattr(component, "label", None)
        return f"the {label} field" if label else f"the field at {where}"
    except (AttributeError, IndexError, KeyError, LookupError, StopIteration, TypeError):
        return f"the field at {where}"


class BodyLimit:
    """ASGI middleware: each request's body within the bound of the route it is sent to."""

    def __init__(self, app: ASGIApp, *, max_upload_bytes: int) -> None:
        self.app = app
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = route_path(scope) in UPLOAD_PATHS
        limit = self.max_upload_bytes + UPLOAD_OVERHEAD_BYTES if upload else MAX_CALL_BODY_BYTES
        detail = upload_too_large(self.max_upload_bytes) if upload else call_too_large()
        length = Headers(scope=scope).get("content-length", "")
        if length.strip().isdigit() and int(length) > limit:
            await too_large(detail)(scope, receive, send)
            return
        route = route_of(scope)
        if takes_json_body(route):
            try:
                body, receive = await read_body(scope, receive, limit)
            except BodyTooLarge:
                await too_large(detail)(scope, receive, send)
                return
            found = long_text(body.parsed)
            if found is not None:
                path, size = found
                message = f"{field_name(scope, body, path)} holds {size / 1024:.0f} KB of text: {WHY}"
                await too_large(message)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        await self._counted(scope, receive, send, limit, detail)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int, detail: str) -> None:
        """Any other route: the body counted as the route reads it, cut off (and answered 413) past `limit`."""
        received = 0
        exceeded = False
        started = False

        async def counting() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise BodyTooLarge(limit)
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the route's own answer to a body cut short is replaced by ours, below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting, guarded)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await too_large(detail)(scope, receive, send)
