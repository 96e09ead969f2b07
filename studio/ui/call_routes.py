"""Gradio's routes that run or read the page's events, as the studio's middleware sees them: which route a request
is, the session it names, its JSON body (read once, kept small, handed on whole), and who is calling.

The page and programs reach events through Gradio's queue (`POST queue/join` from the page, `POST call/<api>` from
programs) and read their outcomes from a session's stream (`GET queue/data?session_hash=`, `GET call/<api>/<event
id>`); `POST run/<api>` runs an endpoint without the queue. Gradio 6's routes sit under `/gradio_api`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import parse_qs

import gradio as gr
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.gateway.mount import path_under_root
from studio.ui.identity import PageAccess, browser_of

API = "/gradio_api"
BODY_KEY = "studio.call_body"  # where the body read once is kept in the request's scope


class Route(Enum):
    JOIN = "join"  # POST queue/join: an event of the page, in a session the body names
    CALL = "call"  # POST call/<api> (or call/v2/<api>): an event for a program; a session where the body names one
    DIRECT = "direct"  # POST run/<api> or api/<api>: the endpoint run at once, outside the queue
    DATA = "data"  # GET queue/data?session_hash=: a session's stream
    CALL_STREAM = "call_stream"  # GET call/<api>/<event id>: the stream of the session that event is in
    HEARTBEAT = "heartbeat"  # GET heartbeat/<session>: closing it ends the session's page
    SESSION_BODY = "session_body"  # POST cancel, component_server: act in the session their body names
    OTHER = "other"


_CALL = re.compile(rf"^{API}/call/(?:v2/)?[^/]+$")
_CALL_STREAM = re.compile(rf"^{API}/call/(?:v2/)?[^/]+/(?P<event>[^/]+)$")
_DIRECT = re.compile(rf"^{API}/(?:run|api)/[^/]+$")
_HEARTBEAT = re.compile(rf"^{API}/heartbeat/(?P<session>[^/]+)$")
_SESSION_BODY = (f"{API}/cancel", f"{API}/component_server")


def route_path(scope: Scope) -> str:
    """The request's path under the app's root, without a trailing slash (Gradio takes both spellings)."""
    return path_under_root(scope).rstrip("/") or "/"


def route_of(scope: Scope) -> Route:
    if scope.get("type") != "http":
        return Route.OTHER
    path, method = route_path(scope), scope.get("method", "GET")
    if method == "POST":
        if path == f"{API}/queue/join":
            return Route.JOIN
        if _CALL.match(path):
            return Route.CALL
        if _DIRECT.match(path):
            return Route.DIRECT
        if path in _SESSION_BODY:
            return Route.SESSION_BODY
    elif method in ("GET", "HEAD"):
        if path == f"{API}/queue/data":
            return Route.DATA
        if _CALL_STREAM.match(path):
            return Route.CALL_STREAM
        if _HEARTBEAT.match(path):
            return Route.HEARTBEAT
    return Route.OTHER


def takes_json_body(route: Route) -> bool:
    return route in (Route.JOIN, Route.CALL, Route.DIRECT, Route.SESSION_BODY)


@dataclass(frozen=True)
class CallBody:
    raw: bytes
    parsed: Any = None  # the JSON value, None where the body is no JSON

    @property
    def session_hash(self) -> str | None:
        value = self.parsed.get("session_hash") if isinstance(self.parsed, dict) else None
        return value if isinstance(value, str) and value else None


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"body over {limit} bytes")
        self.limit = limit


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` whole first, then what the connection says next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def read_body(scope: Scope, receive: Receive, limit: int) -> tuple[CallBody, Receive]:
    """The request's body, at most `limit` bytes (else BodyTooLarge, as soon as it is known), and a `receive` that
    hands it on whole. Kept in the scope: a later reader of the same request gets it without reading again."""
    kept = scope.get(BODY_KEY)
    if isinstance(kept, CallBody):
        return kept, receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        piece = message.get("body", b"")
        size += len(piece)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(piece)
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    try:
        parsed = json.loads(raw) if raw else None
    except (ValueError, RecursionError):  # not JSON, or nested past Python's depth: Gradio answers it
        parsed = None
    body = CallBody(raw, parsed)
    scope[BODY_KEY] = body
    return body, replaying(raw, receive)


def query_session(scope: Scope) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash")
    return values[0] if values and values[0] else None


def path_match(route: Route, scope: Scope, group: str) -> str | None:
    pattern = {Route.CALL_STREAM: _CALL_STREAM, Route.HEARTBEAT: _HEARTBEAT}.get(route)
    found = pattern.match(route_path(scope)) if pattern is not None else None
    return found.group(group) if found else None


def gradio_queue(scope: Scope) -> Any | None:
    """Gradio's event queue, from the app serving this request (Starlette puts the app in the scope)."""
    app = scope.get("app")
    get_blocks = getattr(app, "get_blocks", None)
    return getattr(get_blocks(), "_queue", None) if callable(get_blocks) else None


@dataclass(frozen=True)
class Caller:
    """Who is calling, as the page's events will see them: `key` is who they are (whose sessions), `party` whose
    limits bind them (guests of one client address share theirs: Visitor.party)."""

    key: str
    party: str
    operator: bool = False


def _username(scope: Scope, request: Request) -> str | None:
    """The account signed in to the page, the way Gradio resolves it for an event (its access-token cookie)."""
    app = scope.get("app")
    cookie_id = getattr(app, "cookie_id", None)
    tokens = getattr(app, "tokens", None)
    if cookie_id is None or not isinstance(tokens, dict):
        return None
    token = request.cookies.get(f"access-token-{cookie_id}") or request.cookies.get(
        f"access-token-unsecure-{cookie_id}"
    )
    user = tokens.get(token) if token else None
    return user if isinstance(user, str) else None


def _profile(scope: Scope) -> gr.OAuthProfile | None:
    """The Hugging Face user signed in on a Space, from the session Gradio's sign-in keeps."""
    session = scope.get("session")
    info = session.get("oauth_info") if isinstance(session, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("userinfo"), dict):
        return None
    expires_at = info.get("expires_at")
    if isinstance(expires_at, int | float) and expires_at < time.time():
        return None
    return gr.OAuthProfile(info["userinfo"])


def caller_of(scope: Scope, access: PageAccess, session_hash: str | None = None) -> Caller:
    """The visitor the page would resolve for this request (PageAccess.visitor); where none resolves, the browser
    (the studio's cookie, else the session) or, past that, the client address."""
    request = Request(scope)
    gr_request = gr.Request(request, username=_username(scope, request), session_hash=session_hash)
    visitor = access.visitor(gr_request, _profile(scope))
    if visitor is not None:
        return Caller(key=visitor.id, party=visitor.party or visitor.id, operator=visitor.operator)
    browser = browser_of(gr_request)
    client = scope.get("client")
    address = f"address:{client[0] if client else 'unknown'}"
    return Caller(key=f"browser:{browser}" if browser else address, party=address)


JOIN_ANSWER_BYTES = 4096  # a join's answer is {"event_id": ...}: what is read of it, at most


async def join_event_id(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> str | None:
    """Hand a call that joins the queue to Gradio, passing its answer on as it comes; the id of the event it joined
    as, where it did (None where Gradio refused it)."""
    status = 0
    answer = b""

    async def watching(message: Message) -> None:
        nonlocal status, answer
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and len(answer) < JOIN_ANSWER_BYTES:
            answer += message.get("body", b"")
        await send(message)

    await app(scope, receive, watching)
    if status != 200:
        return None
    try:
        event_id = json.loads(answer).get("event_id")
    except (ValueError, AttributeError):
        return None
    return event_id if isinstance(event_id, str) and event_id else None
