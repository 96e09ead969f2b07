"""Uploads per visitor per hour, refused before their bytes are stored; and uploads no run took, deleted soon.

Gradio's upload route (`POST /gradio_api/upload`) stores whatever it is sent in Gradio's upload folder, for anyone
who may use the page. In front of it, this middleware counts each visitor's uploads and bytes over the last hour
(the sharing settings `visitor_max_uploads_per_hour` and `visitor_max_upload_mb_per_hour`, read at each upload, so
an operator's change binds at once) and refuses one beyond either cap with a JSON message, before reading its body:
- a signed-in visitor counts as their account (the browser's cookie tells the page's visitor: VisitorBook);
- a guest, and a caller the page does not know (no cookie, or one never seen), counts as its client address, so
  that dropping or inventing a cookie starts no new count;
- operators are not held to it.
A request's size is its declared Content-Length (one without it is refused); the files in it are counted as they
stream by, and a request with more than the visitor has left is stopped before Gradio keeps any of them.

Gradio deletes what it stores an hour after it came. An upload is needed only until a run takes it (a run copies
its image into the outputs folder when it is submitted), so the files this route stored are deleted
`UNUSED_UPLOAD_S` after they came, which leaves a page's just-uploaded image usable for that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradio.route_utils import MultiPartException
from gradio.utils import get_upload_folder
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.config import StudioSettings
from studio.ui.client_address import client_address
from studio.ui.file_guard import BROWSER_COOKIE, VisitorBook
from studio.ui.identity import PageAccess

# The routes that store what they are sent: Gradio's upload, and its recording's (a media component's stream).
UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording")
WINDOW_S = 3600.0
UNUSED_UPLOAD_S = 600.0  # an upload no run took lives this long: enough to fill in the form and submit it
SWEEP_EVERY_S = 60.0
MB = 2**20
RESPONSE_KEPT_BYTES = 1 << 20  # the upload route's answer (the stored paths) read back, up to this much


@dataclass(frozen=True)
class UploadCaps:
    uploads_per_hour: int
    mb_per_hour: int


@dataclass(frozen=True)
class UploadRefusal:
    status: int  # 429 (too many uploads), 413 (too many bytes), 411 (no size given)
    limit: str  # the setting that refused it
    message: str
    retry_after_s: int | None = None

    def response(self) -> JSONResponse:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else None
        body = {"error": self.message, "limit": self.limit, "retry_after_s": self.retry_after_s}
        return JSONResponse(body, status_code=self.status, headers=headers)


@dataclass
class _Upload:
    at: float
    bytes: int
    files: int


class UploadLedger:
    """Each key's uploads over the last hour, and the files the upload route stored (for `sweep`). Thread-safe;
    `clock` (seconds) is injectable so that a test moves time instead of waiting."""

    def __init__(
        self,
        caps: Callable[[], UploadCaps],
        clock: Callable[[], float] = time.time,
        window_s: float = WINDOW_S,
        unused_s: float = UNUSED_UPLOAD_S,
    ) -> None:
        self.caps, self.clock, self.window_s, self.unused_s = caps, clock, window_s, unused_s
        self._lock = threading.Lock()
        self._uploads: dict[str, deque[_Upload]] = {}
        self._stored: dict[Path, float] = {}  # a stored file, and when it (last) came

    def _recent(self, key: str, now: float) -> deque[_Upload]:
        uploads = self._uploads.setdefault(key, deque())
        while uploads and uploads[0].at <= now - self.window_s:
            uploads.popleft()
        return uploads

    def take(self, key: str, size: int) -> tuple[_Upload | None, UploadRefusal | None]:
        """Count an upload of `size` bytes (one file until `settle` says how many) for `key`, or say why not."""
        caps = self.caps()
        now = self.clock()
        with self._lock:
            uploads = self._recent(key, now)
            files = sum(upload.files for upload in uploads)
            sent = sum(upload.bytes for upload in uploads)
            retry = math.ceil(uploads[0].at + self.window_s - now) if uploads else None
            if files >= caps.uploads_per_hour:
                return None, UploadRefusal(
                    429,
                    "visitor_max_uploads_per_hour",
                    f"too many uploads: {caps.uploads_per_hour} files an hour per visitor "
                    f"(visitor_max_uploads_per_hour); try again in {_minutes(retry)}",
                    retry,
                )
            allowed = caps.mb_per_hour * MB
            if sent + size > allowed:
                left = max(0, allowed - sent)
                wait = f"; try again in {_minutes(retry)}" if retry and size <= allowed else ""
                return None, UploadRefusal(
                    413,
                    "visitor_max_upload_mb_per_hour",
                    f"this upload of {size / MB:.1f} MB is more than the {left / MB:.1f} MB left of "
                    f"{caps.mb_per_hour} MB an hour per visitor (visitor_max_upload_mb_per_hour){wait}",
                    retry if wait else None,
                )
            upload = _Upload(now, size, 1)
            uploads.append(upload)
            return upload, None

    def files_left(self, key: str, upload: _Upload) -> int:
        """How many files the request counted as `upload` may hold: its one, and what the cap leaves."""
        with self._lock:
            files = sum(u.files for u in self._recent(key, self.clock()))
        return self.caps().uploads_per_hour - files + upload.files

    def settle(self, key: str, upload: _Upload, files: int) -> None:
        """The request is answered: it stored `files` files (0: nothing kept, nothing counted)."""
        with self._lock:
            uploads = self._uploads.get(key)
            if files <= 0:
                if uploads is not None and upload in uploads:
                    uploads.remove(upload)
            else:
                upload.files = files
            if uploads is not None and not uploads:
                del self._uploads[key]

    def stored(self, paths: list[Path]) -> None:
        now = self.clock()
        with self._lock:
            for path in paths:
                self._stored[path] = now

    def sweep(self) -> list[Path]:
        """Delete the stored uploads older than `unused_s` (with their folder, where it is left empty); returns
        them. A run that took one has its own copy already."""
        now = self.clock()
        with self._lock:
            due = [path for path, at in self._stored.items() if at <= now - self.unused_s]
            for path in due:
                del self._stored[path]
            for key in [key for key in self._uploads if not self._recent(key, now)]:
                del self._uploads[key]
        for path in due:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # Gradio's folder for the file's content: removed only where empty
        return due

    @contextlib.asynccontextmanager
    async def sweeping(self, app: Any = None) -> AsyncIterator[None]:
        """While the page serves (a lifespan for launch's app_kwargs): a sweep every SWEEP_EVERY_S seconds."""

        async def every() -> None:
            while True:
                await asyncio.sleep(SWEEP_EVERY_S)
                await asyncio.to_thread(self.sweep)

        task = asyncio.create_task(every())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _minutes(seconds: int | None) -> str:
    return f"{max(1, math.ceil((seconds or 0) / 60))} min"


def _boundary(content_type: str) -> bytes | None:
    match = re.search(r'boundary="?([^";,\s]+)"?', content_type, flags=re.IGNORECASE)
    return match.group(1).encode("latin-1") if match else None


class _PartCounter:
    """How many parts of a multipart body have gone by: its delimiters seen, less the closing one."""

    def __init__(self, boundary: bytes) -> None:
        self.delimiter = b"--" + boundary
        self.seen = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        text = self._tail + chunk
        self.seen += text.count(self.delimiter)
        # What may hold the start of a delimiter split across chunks (and no whole one, counted already).
        keep = len(self.delimiter) - 1
        self._tail = text[-keep:] if keep else b""
        if self.delimiter in self._tail:
            self._tail = b""

    @property
    def parts_done(self) -> int:
        return max(0, self.seen - 1)


class UploadLimit:
    """ASGI middleware in front of Gradio's upload routes: per-visitor caps, and the stored files noted for the
    sweep."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        book: VisitorBook,
        ledger: UploadLedger,
        upload_folder: Path,
        everyone_operator: bool = False,
    ) -> None:
        self.app, self.book, self.ledger = app, book, ledger
        self.upload_folder = Path(upload_folder).resolve()
        self.everyone_operator = everyone_operator

    def key(self, scope: Scope) -> str | None:
        """Whose count an upload goes to; None for an operator, held to no cap."""
        if self.everyone_operator:
            return None
        visitor = self.book.get(HTTPConnection(scope).cookies.get(BROWSER_COOKIE))
        if visitor is not None and visitor.operator:
            return None
        if visitor is not None and not visitor.id.startswith("guest:"):
            return f"visitor:{visitor.party}"
        return f"address:{client_address(scope)}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not scope.get("path", "").rstrip("/").endswith(UPLOAD_ROUTES)
        ):
            await self.app(scope, receive, send)
            return
        key = self.key(scope)
        headers = HTTPConnection(scope).headers
        upload = None
        if key is not None:
            try:
                size = int(headers.get("content-length", ""))
            except ValueError:
                refusal = UploadRefusal(411, "content-length", "an upload must say its size (Content-Length)")
                await refusal.response()(scope, receive, send)
                return
            upload, refusal = self.ledger.take(key, size)
            if refusal is not None:
                await refusal.response()(scope, receive, send)
                return
        await self._forward(scope, receive, send, key, upload, _boundary(headers.get("content-type", "")))

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, key: str | None, upload: Any, boundary: bytes | None
    ) -> None:
        counter = _PartCounter(boundary) if boundary else None
        allowed = self.ledger.files_left(key, upload) if key is not None and upload is not None else None
        stopped: list[UploadRefusal] = []
        status: list[int] = []
        answer = bytearray()

        async def counted_receive() -> Message:
            message = await receive()
            if counter is not None and message["type"] == "http.request":
                counter.feed(message.get("body", b""))
                if allowed is not None and counter.parts_done > allowed:
                    caps = self.ledger.caps()
                    stopped.append(
                        UploadRefusal(
                            429,
                            "visitor_max_uploads_per_hour",
                            f"too many files in this upload: {caps.uploads_per_hour} files an hour per visitor "
                            f"(visitor_max_uploads_per_hour), {allowed} left",
                        )
                    )
                    # Gradio's upload parser drops the files of a request that fails this way: none is kept.
                    raise MultiPartException("too many files for this visitor's uploads per hour")
            return message

        settled: list[bool] = []

        def settle(paths: list[Path]) -> None:
            if not settled:
                settled.append(True)
                self.ledger.stored(paths)
                if key is not None and upload is not None:
                    self.ledger.settle(key, upload, len(paths))

        async def noting_send(message: Message) -> None:
            if stopped:
                return  # Gradio's answer to the stopped request is replaced by the studio's, below
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body" and status[:1] == [200]:
                if len(answer) < RESPONSE_KEPT_BYTES:
                    answer.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    settle(self._stored_paths(bytes(answer)))  # before the caller hears of them
            await send(message)

        try:
            await self.app(scope, counted_receive, noting_send)
        finally:
            settle([])  # answered otherwise: nothing stored, nothing counted
        if stopped:
            await stopped[0].response()(scope, receive, send)

    def _stored_paths(self, answer: bytes) -> list[Path]:
        """The files the upload route says it stored, where they are in its folder (nothing else is ever swept)."""
        try:
            names = json.loads(answer)
        except ValueError:
            return []
        paths = []
        for name in names if isinstance(names, list) else []:
            if isinstance(name, str):
                path = Path(name).resolve()
                if path.is_relative_to(self.upload_folder) and path != self.upload_folder:
                    paths.append(path)
        return paths


def upload_caps(settings: StudioSettings) -> UploadCaps:
    return UploadCaps(settings.visitor_max_uploads_per_hour, settings.visitor_max_upload_mb_per_hour)


def upload_limit(ledger: UploadLedger, access: PageAccess) -> Middleware:
    """The middleware for launch's app_kwargs, in front of the upload folder Gradio stores in."""
    return Middleware(
        UploadLimit,
        book=access.book,
        ledger=ledger,
        upload_folder=Path(get_upload_folder()),
        everyone_operator=access.policy.everyone_operator,
    )
