"""The studio's files, each for its owner alone, through one route of the studio's own; and a mark that tells one
browser from another.

Gradio serves nothing from the outputs folder (launch.py puts it in Gradio's `blocked_paths`, so none of Gradio's
file routes, whatever their spelling, reads there). The page links the studio's files as `studio/files/<path under
the outputs folder>`, and this middleware answers that route itself:
- a video, its poster and its sidecar (`videos/<day>/req_….mp4|.jpg|.json`) and a run's export
  (`exports/run_….json|.csv`) go to the visitor whose run made them, and to operators;
- what a bench wrote (`bench/<time>/…`) goes to operators;
- nothing else (the history database and its journal, logs, the studio's secrets) goes to anyone.
Every other request whose path names a studio file or the outputs folder, in any encoding, is refused before it
reaches Gradio, so a route added to Gradio later cannot serve one either.

A file request carries the browser's cookies but not the page's session, so the page records which visitor each
browser is (VisitorBook, by the cookie set here on a browser's first request). That record holds only while the
sign-in it was made under does: a file goes to an account's browser only while the request still carries that
account's live sign-in (Gradio's access token, or the Hugging Face session on a Space), so that nothing is served
after signing out, nor to another account that signs in on the same browser before its first event.
"""

from __future__ import annotations

import mimetypes
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import FileResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.backend.face import Visitor

BROWSER_COOKIE = "omni-studio-browser"
FILES_ROUTE = "/studio/files/"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
REQUEST_ID = r"req_[0-9a-f]{12}"
RUN_ID = r"run_\d{8}_\d{6}_[0-9a-f]{6}"
# What the route serves, by the file's path under the outputs folder: (pattern, who may have it).
VISITOR_FILE = re.compile(
    rf"^videos/[0-9-]+/(?P<id>{REQUEST_ID})\.(mp4|jpg|json)$|^exports/(?P<run>{RUN_ID})\.(json|csv)$"
)
OPERATOR_FILE = re.compile(r"^bench/[0-9_]+/[A-Za-z0-9_.-]+\.(png|json|csv)$")
# A studio file's name anywhere in a path: no route but the studio's own may answer for it.
STUDIO_NAME = re.compile(rf"{REQUEST_ID}|{RUN_ID}")
DOWNLOADED = {".json", ".csv"}  # given as attachments: never rendered by the browser as a page


def signed_in_as(scope: Scope) -> str | None:
    """The visitor id of the sign-in this request carries, as Gradio resolves it (routes.py get_current_user: the
    `access-token-<cookie id>` cookie, or its `-unsecure-` twin, looked up in the app's live tokens, which sign-out
    removes), or a Hugging Face session's user; None where it carries none that is live."""
    app = scope.get("app")
    tokens = getattr(app, "tokens", None)
    cookie_id = getattr(app, "cookie_id", None)
    if isinstance(tokens, dict) and cookie_id:
        cookies = HTTPConnection(scope).cookies
        token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
        user = tokens.get(token) if token else None
        if user:
            return f"user:{user}"
    session = scope.get("session")  # a Space's sign-in with Hugging Face
    info = session.get("oauth_info") if isinstance(session, dict) else None
    if isinstance(info, dict):
        expires_at = info.get("expires_at")
        name = (info.get("userinfo") or {}).get("preferred_username")
        if name and not (isinstance(expires_at, int | float) and expires_at < time.time()):
            return f"hf:{name}"
    return None


def still_signed_in(scope: Scope, visitor: Visitor) -> bool:
    """Whether `visitor`, as the page last knew the browser, is still who this request is signed in as. Guests and
    the operator of a studio without sign-in are known by the browser alone: nothing to check."""
    if not visitor.id.startswith(("user:", "hf:")):
        return True
    return signed_in_as(scope) == visitor.id


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


def fully_decoded(text: str, rounds: int = 4) -> str:
    """`text` with its percent-encoding undone until it stops changing (double encoding included)."""
    for _ in range(rounds):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


@dataclass(frozen=True)
class FileVerdict:
    path: Path | None = None  # the file to send, where it may be sent
    status: int = 200
    reason: str = ""


class StudioFiles:
    """Who may have which of the outputs folder's files: `owner_of` names the visitor whose run an id is."""

    def __init__(self, outputs_root: Path, owner_of: Callable[[str], str | None]) -> None:
        self.root = Path(outputs_root).resolve()
        self.owner_of = owner_of

    def relative(self, path: Path) -> str | None:
        """A file's path under the outputs folder, as the route names it; None for a file outside it."""
        try:
            return Path(path).resolve().relative_to(self.root).as_posix()
        except (OSError, RuntimeError, ValueError):
            return None

    def verdict(self, relative: str, visitor: Visitor | None) -> FileVerdict:
        relative = fully_decoded(relative)
        parts = PurePosixPath(relative).parts
        if not relative or "\x00" in relative or "\\" in relative or any(p in ("..", ".") for p in parts):
            return FileVerdict(status=404, reason="no such file")
        owned = VISITOR_FILE.match(relative)
        if owned is None and OPERATOR_FILE.match(relative) is None:
            return FileVerdict(status=403, reason="this file is not served")
        if visitor is None:
            return FileVerdict(status=403, reason="sign in to the studio's page first")
        if owned is not None:
            owner = self.owner_of(owned.group("id") or owned.group("run"))
            if owner is None:
                return FileVerdict(status=404, reason="no such file in this studio's history")
            if not (visitor.operator or visitor.id == owner):
                return FileVerdict(status=403, reason="this file belongs to another visitor")
        elif not visitor.operator:
            return FileVerdict(status=403, reason="only an operator of this studio can see the bench's files")
        target = self.root / relative
        try:
            resolved = target.resolve(strict=True)
        except (OSError, RuntimeError):
            return FileVerdict(status=404, reason="no such file")
        # A link inside the folder that points out of it serves nothing.
        if not resolved.is_relative_to(self.root) or not resolved.is_file():
            return FileVerdict(status=404, reason="no such file")
        return FileVerdict(path=resolved)

    def names_studio_file(self, raw_path: str, query: str) -> bool:
        """Whether a request for another route names one of the studio's files or the outputs folder."""
        text = fully_decoded(f"{raw_path}?{query}")
        return bool(STUDIO_NAME.search(text)) or f"{self.root.as_posix()}/" in text


class StudioFileGuard:
    """ASGI middleware in front of Gradio's routes: the studio's file route, answered here; every other route kept
    from the studio's files; every browser without the studio's cookie given one."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        outputs_root: Path,
        owner_of: Callable[[str], str | None],
        book: VisitorBook,
    ) -> None:
        self.app = app
        self.files = StudioFiles(outputs_root, owner_of)
        self.book = book

    async def serve(self, scope: Scope, receive: Receive, send: Send, browser: str | None) -> None:
        raw = scope.get("raw_path") or scope.get("path", "").encode()
        relative = raw.decode("latin-1").split("?", 1)[0].removeprefix(FILES_ROUTE)
        visitor = self.book.get(browser)
        if visitor is not None and not still_signed_in(scope, visitor):
            visitor = None  # signed out, or someone else signed in since: "sign in to the studio's page first"
        verdict = self.files.verdict(relative, visitor)
        if scope.get("method") not in ("GET", "HEAD"):
            verdict = FileVerdict(status=405, reason="the studio's files are read with GET")
        if verdict.path is None:
            await PlainTextResponse(verdict.reason, status_code=verdict.status)(scope, receive, send)
            return
        media_type = mimetypes.guess_type(verdict.path.name)[0] or "application/octet-stream"
        disposition = "attachment" if verdict.path.suffix in DOWNLOADED else "inline"
        headers = {
            "Cache-Control": "private, max-age=3600",
            "X-Content-Type-Options": "nosniff",
            "Content-Disposition": f'{disposition}; filename="{verdict.path.name}"',
        }
        await FileResponse(verdict.path, media_type=media_type, headers=headers)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        browser = connection.cookies.get(BROWSER_COOKIE)
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(FILES_ROUTE):
            await self.serve(scope, receive, send, browser)
            return
        raw = (scope.get("raw_path") or path.encode()).decode("latin-1")
        if self.files.names_studio_file(raw, scope.get("query_string", b"").decode("latin-1")):
            if scope["type"] == "http":
                await PlainTextResponse("the studio's files are served at studio/files/ only", 403)(
                    scope, receive, send
                )
            else:
                await send({"type": "websocket.close", "code": 1008})
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
