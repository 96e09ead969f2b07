"""The operator's endpoints, an operator's alone at the door: a guard in front of Gradio's call routes and its API
listing.

Each operator endpoint's handler refuses anyone else (PageAccess.require_operator), but Gradio runs its input
components' checks before the handler: a visitor's value outside a radio's or a dropdown's choices failed there, a
traceback in the studio's log instead of a refusal. Here a call that names an operator endpoint, by its API name
(`call/<api>`, `run/<api>`) or by its event's index (`queue/join`, or a `fn_index` in any call's body, which Gradio
prefers to the name), is answered 403 with the reason for anyone but an operator, before Gradio reads its values.
The caller is the one the page would resolve (call_routes.caller_of): with no sign-in configured the person at the
keyboard is the operator, and nothing changes for them.

The API listing (`/gradio_api/info`, which gradio_client and the page's "Use via API" read, and `openapi.json`) is
the same for everyone in Gradio; here a visitor's copy leaves the operator endpoints out. The page's config still
names every event (the page's own buttons are wired by it); a visitor's page shows no operator tab.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.ui.call_routes import API, CallBody, Route, caller_of, read_body, route_of, route_path
from studio.ui.identity import PageAccess

# The API names of the events whose handlers call PageAccess.require_operator (bench_tab.py, server_tab.py).
OPERATOR_APIS = frozenset(
    {
        "apply_layout",
        "ask_apply_layout",
        "ask_stop_server",
        "auto_restart",
        "cancel_apply_layout",
        "close_stop_question",
        "bench",
        "doctor",
        "plan",
        "restart_replica",
        "restart_server",
        "sharing",
        "start_server",
        "stop_replica",
        "stop_server",
    }
)
LISTINGS = (f"{API}/info", f"{API}/openapi.json")
_FN_INDEX = TypeAdapter(int)  # as Gradio's PredictBody reads `fn_index`: "7" and 7.0 name event 7 too


def refusal(api: str) -> str:
    return f"only an operator of this studio can call /{api}"


def fn_index_of(body: CallBody) -> int | None:
    value = body.parsed.get("fn_index") if isinstance(body.parsed, dict) else None
    if value is None or isinstance(value, bool):
        return None
    try:
        return _FN_INDEX.validate_python(value)
    except ValidationError:
        return None


def _blocks(scope: Scope) -> Any | None:
    get_blocks = getattr(scope.get("app"), "get_blocks", None)
    return get_blocks() if callable(get_blocks) else None


def operator_fns(scope: Scope, apis: frozenset[str]) -> dict[int, str]:
    """The page's operator events: each event's index, and its API name."""
    blocks = _blocks(scope)
    fns = getattr(blocks, "fns", None) or {}
    return {index: fn.api_name for index, fn in fns.items() if getattr(fn, "api_name", None) in apis}


def named_api(scope: Scope, route: Route) -> str | None:
    """The API name in a call's path: `call/<api>`, `call/v2/<api>`, `run/<api>`, `api/<api>`."""
    path = route_path(scope)
    if route is Route.CALL:
        return path.removeprefix(f"{API}/call/").removeprefix("v2/")
    if route is Route.DIRECT:
        return path.rsplit("/", 1)[-1]
    return None


def operator_api_called(scope: Scope, route: Route, body: CallBody, apis: frozenset[str]) -> str | None:
    """The operator endpoint a call names, by its path or by the event index in its body; None for any other."""
    name = named_api(scope, route)
    if name in apis:
        return name
    index = fn_index_of(body)
    return operator_fns(scope, apis).get(index) if index is not None else None


def _endpoint_api(path: str) -> str:
    """The API name an openapi.json path is about (`/gradio_api/call/v2/<api>`, `/gradio_api/call/<api>/{id}`)."""
    rest = path.removeprefix(f"{API}/call/")
    if rest == path:
        return ""
    return rest.removeprefix("v2/").split("/", 1)[0]


def visitors_listing(listing: Any, apis: frozenset[str], fn_ids: set[int]) -> Any:
    """A listing (/info or openapi.json) without the operator endpoints."""
    if not isinstance(listing, dict):
        return listing
    shown = dict(listing)
    named = listing.get("named_endpoints")
    if isinstance(named, dict):
        shown["named_endpoints"] = {name: info for name, info in named.items() if name.lstrip("/") not in apis}
    unnamed = listing.get("unnamed_endpoints")
    if isinstance(unnamed, dict):
        hidden = {str(fn_id) for fn_id in fn_ids}
        shown["unnamed_endpoints"] = {key: info for key, info in unnamed.items() if str(key) not in hidden}
    paths = listing.get("paths")
    if isinstance(paths, dict):
        shown["paths"] = {path: item for path, item in paths.items() if _endpoint_api(path) not in apis}
    return shown


def is_listing(scope: Scope) -> bool:
    return scope.get("type") == "http" and scope.get("method") == "GET" and route_path(scope) in LISTINGS


class OperatorCalls:
    """ASGI middleware: the operator endpoints refused to, and left out of the API listing of, anyone but an
    operator."""

    def __init__(self, app: ASGIApp, *, access: PageAccess, apis: frozenset[str] = OPERATOR_APIS) -> None:
        self.app = app
        self.access = access
        self.apis = apis

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope)
        if route in (Route.JOIN, Route.CALL, Route.DIRECT):
            body, receive = await read_body(scope, receive, limit=1 << 30)  # bounded by BodyLimit, in front
            api = operator_api_called(scope, route, body, self.apis)
            if api is not None and not caller_of(scope, self.access, body.session_hash).operator:
                # The caller's answer, not the studio's error: nothing is logged.
                await JSONResponse({"detail": refusal(api)}, status_code=403)(scope, receive, send)
                return
        elif is_listing(scope) and not caller_of(scope, self.access).operator:
            await self._listing_for_visitors(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _listing_for_visitors(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Gradio's listing, held back until whole, then passed on without the operator endpoints (its headers,
        the studio's cookie among them, kept; its length set anew). An answer other than 200 passes as it is."""
        start: Message | None = None
        chunks: list[bytes] = []

        async def holding(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message.get("status") == 200:
                start = message
            elif start is not None and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await self._send_filtered(scope, start, b"".join(chunks), send)
            else:
                await send(message)

        await self.app(scope, receive, holding)

    async def _send_filtered(self, scope: Scope, start: Message, raw: bytes, send: Send) -> None:
        try:
            listing = json.loads(raw)
        except (ValueError, RecursionError):
            content = raw
        else:
            fn_ids = set(operator_fns(scope, self.apis))
            content = json.dumps(visitors_listing(listing, self.apis, fn_ids)).encode()
        headers = [(key, value) for key, value in start.get("headers", []) if key.lower() != b"content-length"]
        headers.append((b"content-length", str(len(content)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": content, "more_body": False})
