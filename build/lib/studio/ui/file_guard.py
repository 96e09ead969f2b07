"""Each visitor's files for that visitor alone, and a mark that tells one browser from another.

Gradio serves files at `.../file=<path>` to whoever has the page: the files the page shows (copied into its
cache under their own names) and anything under the paths the studio allows. The studio names its files by
request or run id (`req_….mp4`, `.jpg`, `.json`; `run_….csv`), so a file's name says whose it is: this middleware
lets a video, poster, sidecar or export through only to the visitor whose run made it, or to an operator, and
nothing else of the outputs dir (the history database, logs) to anyone.

A file request carries the browser's cookies but not the page's session, so the page records which visitor
each browser is (VisitorBook, by the cookie set here on a browser's first request).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path, PurePath

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.backend.visitors import Visitor

BROWSER_COOKIE = "omni-studio-browser"
FILE_ROUTE = re.compile(r"/file=(?P<path>.+)$")
OWNED_NAME = re.compile(r"^(?P<id>req_[0-9a-f]{12}|run_\d{8}_\d{6}_[0-9a-f]{6})(\.|$)")
COOKIE_MAX_AGE_S = 30 * 24 * 3600


class VisitorBook:
    """Which visitor each browser was when it last used the page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_browser: dict[str, Visitor] = {}

    def note(self, browser: str, visitor: Visitor) -> None:
        with self._lock:
            self._by_browser[browser] = visitor

    def get(self, browser: str | None) -> Visitor | None:
        if not browser:
            return None
        with self._lock:
            return self._by_browser.get(browser)


def _within(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):
        return False


class StudioFileGuard:
    """ASGI middleware in front of Gradio's routes: file requests of the studio's files are checked; every
    browser without the studio's cookie gets one."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        outputs_root: Path,
        owner_of: Callable[[str], str | None],
        book: VisitorBook,
    ) -> None:
        self.app = app
        self.outputs_root = Path(outputs_root)
        self.owner_of = owner_of
        self.book = book

    def refusal(self, path: str, browser: str | None) -> str | None:
        """Why this request may not have its file; None where it may (or is no file request of the studio's)."""
        match = FILE_ROUTE.search(path)
        if match is None:
            return None
        target = match.group("path")
        owned = OWNED_NAME.match(PurePath(target).name)
        if owned is None:
            return "this file is not served" if _within(Path(target), self.outputs_root) else None
        owner = self.owner_of(owned.group("id"))
        visitor = self.book.get(browser)
        if owner is None:
            return "no such file in this studio's history"
        if visitor is None:
            return "sign in to the studio's page first"
        if not (visitor.operator or visitor.id == owner):
            return "this file belongs to another visitor"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        browser = connection.cookies.get(BROWSER_COOKIE)
        if scope["type"] == "http":
            refused = self.refusal(scope.get("path", ""), browser)
            if refused:
                await PlainTextResponse(refused, status_code=403)(scope, receive, send)
                return
        if browser:
            await self.app(scope, receive, send)
            return
        mark = secrets.token_urlsafe(18)
        # A Space shows the page in a frame of another site, where only a `SameSite=None; Secure` cookie is sent;
        # a browser drops a Secure cookie on plain http (loopback), where Lax serves.
        https = "https" in (scope.get("scheme"), connection.headers.get("x-forwarded-proto"))
        same_site = "None; Secure" if https else "Lax"

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.append(
                    "set-cookie",
                    f"{BROWSER_COOKIE}={mark}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; SameSite={same_site}",
                )
            await send(message)

        await self.app(scope, receive, send_with_cookie)
