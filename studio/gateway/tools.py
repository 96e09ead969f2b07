"""The studio's MCP tools (`--mcp`): make a video, follow it, list one's own. Each is one of the gateway's operations
(serving.py) called as the key's visitor, under the gateway's rules: the same keys and their failure limit, the
visitor's quotas and fair-share turn, the guardrail policy, History. The page's side (ui/mcp_tools.py) registers them
with Gradio's MCP server and hands each call's headers here.

A tool answers a video's record as GET /v1/videos/{id} has it, with `content_url`: the gateway's URL of the mp4,
which answers the same key alone.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from studio.backend.face import Visitor
from studio.gateway.callers import CallerRefused, GatewayAccess
from studio.gateway.mount import PREFIX
from studio.gateway.serving import GatewayProblem, VideoGateway
from studio.protocol import JobRecord, JobStatus

MAX_FOLLOW_S = 20.0  # a follow answers within this (under the 30 s after which many clients and proxies give up)
FOLLOW_POLL_S = 0.25
MAX_LIST = 100
KEY_NOTE = "content_url answers your API key alone: send it as the header Authorization: Bearer KEY"


class ToolRefused(Exception):
    """A tool call the studio refuses; the message says why in the caller's words (the gateway's)."""


@dataclass(frozen=True)
class ToolCaller:
    """What a tool call tells of its caller: the Authorization header, the client address as the page's limits read
    it, the Host it names, whether a browser says it comes from another site, and the studio's address as the caller
    reached it (for the URLs a tool answers)."""

    authorization: str | None
    address: str
    host: str
    cross_site: bool
    base_url: str


class VideoTools:
    def __init__(
        self, gateway: VideoGateway, access: GatewayAccess, max_follows: Callable[[], int | None] = lambda: None
    ) -> None:
        """`max_follows`: each visitor's follows waiting at once (None: no cap; operators are held to none), read at
        each call so that an operator's change applies at once."""
        self.gateway = gateway
        self.access = access
        self.max_follows = max_follows
        self._following: Counter[str] = Counter()

    def visitor(self, caller: ToolCaller) -> Visitor:
        try:
            return self.access.caller(caller.authorization, caller.address, caller.host, caller.cross_site)
        except CallerRefused as exc:
            raise ToolRefused(exc.message) from None

    def answer(self, record: JobRecord, caller: ToolCaller) -> dict[str, Any]:
        return {
            **record.model_dump(mode="json"),
            "content_url": f"{caller.base_url.rstrip('/')}{PREFIX}/videos/{record.id}/content",
        }

    async def generate(self, caller: ToolCaller, fields: dict[str, str]) -> dict[str, Any]:
        """A video queued from the contract's form fields (POST /v1/videos's, as text): its record."""
        visitor = self.visitor(caller)
        try:
            view = await self.gateway.create(fields, None, visitor)
            record = self.gateway.retrieve(view.id, visitor)
        except GatewayProblem as exc:
            raise ToolRefused(_with_retry(exc)) from None
        return {**self.answer(record, caller), "note": KEY_NOTE}

    async def follow(self, caller: ToolCaller, video_id: str, wait_s: float) -> dict[str, Any]:
        """The video's record once it has finished, or after `wait_s` (at most MAX_FOLLOW_S): while its status is
        queued or in_progress, follow again."""
        visitor = self.visitor(caller)
        video_id = (video_id or "").strip()
        deadline = time.monotonic() + min(max(0.0, float(wait_s)), MAX_FOLLOW_S)
        with self._one_follow(visitor):
            try:
                record = await asyncio.to_thread(self.gateway.retrieve, video_id, visitor)
                while not _finished(record) and time.monotonic() < deadline:
                    await asyncio.sleep(FOLLOW_POLL_S)
                    record = await asyncio.to_thread(self.gateway.retrieve, video_id, visitor)
            except GatewayProblem as exc:
                raise ToolRefused(exc.message) from None
        return {**self.answer(record, caller), "note": KEY_NOTE}

    async def videos(self, caller: ToolCaller, limit: int, after: str) -> dict[str, Any]:
        """The caller's own videos, newest first: a page of `limit`, from after the video `after` names."""
        visitor = self.visitor(caller)
        limit = min(max(0, int(limit)), MAX_LIST)
        try:
            page = await asyncio.to_thread(self.gateway.page, visitor, (after or "").strip() or None, limit)
        except GatewayProblem as exc:
            raise ToolRefused(exc.message) from None
        return {"data": [self.answer(record, caller) for record in page.data], "has_more": page.has_more}

    @contextmanager
    def _one_follow(self, visitor: Visitor) -> Iterator[None]:
        """A follow holds a place in the studio while it waits: a visitor may hold `max_follows` at once."""
        cap = None if visitor.operator else self.max_follows()
        if cap is not None and self._following[visitor.id] >= cap:
            raise ToolRefused(
                f"too many follows at once: a visitor may wait on at most {cap} at a time; wait for one of yours to "
                "answer, then follow again"
            )
        self._following[visitor.id] += 1
        try:
            yield
        finally:
            self._following[visitor.id] -= 1
            if self._following[visitor.id] <= 0:
                del self._following[visitor.id]


def _finished(record: JobRecord) -> bool:
    return record.status in (JobStatus.COMPLETED, JobStatus.FAILED)


def _with_retry(problem: GatewayProblem) -> str:
    retry = problem.headers.get("Retry-After")
    return f"{problem.message} (ask again in {retry} s)" if retry else problem.message
