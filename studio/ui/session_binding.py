"""A page session belongs to the visitor who made it: a guard in front of Gradio's queue routes.

Gradio keys a page's events and their outcomes by the session hash the page (or a program) picks, and hands a
session's stream (`queue/data?session_hash=`) to anyone who names it: another visitor holding the hash read the
outcomes of the owner's events (their History, their runs). Here the first call that joins the queue in a session
binds it to its caller (the visitor the page resolves: an account, a Hugging Face user, a guest; see call_routes);
from then on a call in that session, a read of its stream, its heartbeat and a cancel in it are answered 403 for
anyone else. A program's call without a session hash is its own session, named by the event's id: the id is bound
the same way when the call is taken, and reading `call/<api>/<event id>` is checked by the session it is in.

Memory is bounded: past MAX_SESSIONS, the session used least recently is forgotten (Gradio itself keeps the
messages of far fewer sessions).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from studio.ui.call_routes import (
    Route,
    caller_of,
    gradio_queue,
    join_event_id,
    path_match,
    query_session,
    read_body,
    route_of,
)
from studio.ui.identity import PageAccess

MAX_SESSIONS = 50_000
NOT_YOURS = (
    "this page session belongs to another visitor: reload the page to start your own (a program: use a session "
    "hash of its own, or none)"
)


class SessionBook:
    """Which caller made each session; bounded, least recently used forgotten first. Thread-safe."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.max_sessions = max_sessions

    def owner(self, session: str) -> str | None:
        with self._lock:
            owner = self._owners.get(session)
            if owner is not None:
                self._owners.move_to_end(session)
            return owner

    def allows(self, session: str | None, key: str) -> bool:
        """Whether `key` may act in `session`: it is theirs, or no one's yet."""
        if not session:
            return True
        owner = self.owner(session)
        return owner is None or owner == key

    def bind(self, session: str, key: str) -> bool:
        """Make `session` `key`'s where it is no one's; whether it is `key`'s now."""
        with self._lock:
            owner = self._owners.setdefault(session, key)
            self._owners.move_to_end(session)
            while len(self._owners) > self.max_sessions:
                self._owners.popitem(last=False)
            return owner == key


def event_session(scope: Scope, event_id: str) -> str:
    """The session an event is in, as Gradio's `call/<api>/<event id>` finds it: the event's own id where the
    call named none."""
    queue = gradio_queue(scope)
    event = getattr(queue, "event_ids_to_events", {}).get(event_id) if queue is not None else None
    if event is not None:
        return event.session_hash
    for session, ids in list(getattr(queue, "pending_event_ids_session", {}).items()):
        if event_id in ids:
            return session
    return event_id


class SessionBinding:
    """ASGI middleware: each session's calls and streams for the visitor who made it."""

    def __init__(self, app: ASGIApp, *, access: PageAccess, book: SessionBook | None = None) -> None:
        self.app = app
        self.access = access
        self.book = book or SessionBook()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope)
        if route in (Route.OTHER, Route.DIRECT):
            await self.app(scope, receive, send)
            return
        session: str | None
        if route in (Route.JOIN, Route.CALL, Route.SESSION_BODY):
            body, receive = await read_body(scope, receive, limit=1 << 30)  # bounded by BodyLimit, in front
            session = body.session_hash
        elif route is Route.DATA:
            session = query_session(scope)
        elif route is Route.HEARTBEAT:
            session = path_match(route, scope, "session")
        else:  # a call's stream, by its event id
            event_id = path_match(route, scope, "event") or ""
            session = event_session(scope, event_id)
        key = caller_of(scope, self.access, session).key
        if not self.book.allows(session, key):
            await JSONResponse({"detail": NOT_YOURS}, status_code=403)(scope, receive, send)
            return
        if route not in (Route.JOIN, Route.CALL):
            await self.app(scope, receive, send)
            return
        await self._joined(scope, receive, send, session, key)

    async def _joined(self, scope: Scope, receive: Receive, send: Send, session: str | None, key: str) -> None:
        """A call taken into the queue binds its session (or, with none named, its event id) to its caller."""
        event_id = await join_event_id(self.app, scope, receive, send)
        if event_id is None:
            return
        self.book.bind(session if session is not None else event_id, key)
