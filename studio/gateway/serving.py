"""The gateway's operations, one method each, over the studio's controller: what the routes (routes.py) call.

A video is one request of the studio's, made by the page's own path: the form becomes one RunSpec (forms.py), the
controller checks it and makes the run of the caller's (their limits, the guardrail policy, the fair-share turn,
the fleet's router, History), and the run starts on the event loop that serves the call, as the page's runs do.
A video is read from the board while it is in the studio's memory, else from History; another visitor's video is
"not found", in the same words as one that never was (operators see everyone's, as on the page).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from studio.backend.face import (
    NotYours,
    RequestState,
    RequestView,
    RunFilter,
    RunTooLarge,
    StudioController,
    Visitor,
    VisitorLimitExceeded,
    check_image_file,
    image_inputs,
)
from studio.gateway import forms, records
from studio.gateway.forms import FormProblem
from studio.protocol import JobDeleted, JobList, JobRecord, JobStatus
from studio.tiers import TierError

HOUR_S = 3600.0
QUEUE_RETRY_S = 10  # a visitor's queue is full: one of theirs is sent within moments, as a slot frees
CANCEL_WAIT_S = 2.0  # vLLM-Omni's: a DELETE whose cancel takes longer answers 409
POLL_S = 0.25
SYNC_TIMEOUT_S = 600.0  # vLLM-Omni's VIDEO_SYNC_TIMEOUT default: queue wait included
MAX_PAGE = 100
DEFAULT_PAGE = 20  # the openai SDK's and OpenAI's
UPLOADS_DIR = "uploads"  # under the outputs folder, beside the page's kept images


@dataclass
class GatewayProblem(Exception):
    """An answer in the error envelope: the status, the studio's words, the field at fault, extra headers."""

    status: int
    message: str
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def not_found(video_id: str) -> GatewayProblem:
    return GatewayProblem(404, f"Video {video_id[:80]!r} not found")


@dataclass(frozen=True)
class Upload:
    """An input_reference part of the form: its file name and its bytes."""

    filename: str
    data: bytes


@dataclass(frozen=True)
class Found:
    """A video the caller may see: on the board (view) or in History (row)."""

    view: RequestView | None = None
    row: dict[str, Any] | None = None

    @property
    def video_path(self) -> Path | None:
        if self.view is not None:
            return self.view.video_path
        return Path(self.row["video_path"]) if self.row.get("video_path") else None


class VideoGateway:
    def __init__(self, controller: StudioController) -> None:
        self.controller = controller

    @property
    def model_name(self) -> str:
        """The model the studio's requests name: the served model's name, else the model's folder or id."""
        settings = self.controller.settings
        return settings.served_model_name or Path(str(settings.model).rstrip("/")).name or str(settings.model)

    # ---- making a video ---------------------------------------------------------------------------------
    async def create(self, form: Mapping[str, Any], upload: Upload | None, visitor: Visitor) -> RequestView:
        """POST /v1/videos: the request, queued and started; raises GatewayProblem."""
        controller = self.controller
        # The contract refuses an upload together with image_reference; the upload is kept once all else passed.
        request, sent = forms.contract_request(form)
        try:
            spec = forms.run_spec(
                request, sent, model_name=self.model_name, default_tier=controller.settings.default_tier
            )
            spec = controller.checked_spec(spec)
        except FormProblem as problem:
            raise GatewayProblem(problem.status, problem.message, problem.param) from None
        except TierError as exc:
            problem = forms.shape_problem(str(exc))
            raise GatewayProblem(400, problem.message, problem.param) from None
        except ValidationError as exc:
            problem = FormProblem.of_validation(exc)
            raise GatewayProblem(400, problem.message, problem.param) from None
        except RunTooLarge as exc:
            raise GatewayProblem(400, str(exc)) from None
        if upload is not None:
            image = await asyncio.to_thread(self._kept_upload, upload)
            spec = spec.model_copy(update={"input_reference": image})
        refusal = spec.image_refusal(controller.settings.engine)
        if refusal is not None:
            raise GatewayProblem(400, refusal, "body.image_reference" if spec.image_url else "body.input_reference")
        private_ok = visitor.operator or controller.settings.allow_private_image_urls
        refusal = await asyncio.to_thread(spec.image_url_refusal, private_ok)
        if refusal is not None:
            raise GatewayProblem(400, f"image_reference {refusal}", "body.image_reference")
        if controller.starting:
            await controller.wait_until_ready()
        try:
            run = controller.new_run(spec, visitor)
        except VisitorLimitExceeded as exc:
            retry = await asyncio.to_thread(self._retry_after_s, visitor)
            raise GatewayProblem(429, str(exc), headers={"Retry-After": str(retry)}) from None
        except ValueError as exc:  # a ValidationError too
            raise GatewayProblem(400, str(exc)) from None
        except RuntimeError as exc:  # the engine not ready, the outputs' disk full
            raise GatewayProblem(503, str(exc)) from None
        run.start()
        return run.views[0]

    def _kept_upload(self, upload: Upload) -> Path:
        """The uploaded image kept in the outputs folder, named by its content (the run reads it from there), once
        it is checked as the page checks its uploads; raises GatewayProblem."""
        if not image_inputs(self.controller.settings).upload:
            raise GatewayProblem(400, image_inputs(self.controller.settings).why_not or "", "body.input_reference")
        folder = self.controller.store.root / UPLOADS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        suffix = Path(upload.filename or "image").suffix.lower()
        partial = folder / f".upload-{secrets.token_hex(8)}{suffix}"
        partial.write_bytes(upload.data)
        try:
            check_image_file(partial)
        except ValueError as exc:
            partial.unlink(missing_ok=True)
            raise GatewayProblem(400, f"input_reference: {exc}", "body.input_reference") from None
        kept = folder / f"{hashlib.sha256(upload.data).hexdigest()[:32]}{suffix}"
        os.replace(partial, kept)
        return kept

    def _retry_after_s(self, visitor: Visitor) -> int:
        """When a visitor over a limit may ask again: where their videos of the last hour are at the limit, once the
        oldest of them is an hour old; else (their queue is full) in a few seconds."""
        settings, store = self.controller.settings, self.controller.store
        hourly, now = settings.visitor_max_videos_per_hour, time.time()
        if hourly is None or store.requests_since(visitor.id, now - HOUR_S) < hourly:
            return QUEUE_RETRY_S
        runs = store.recent_runs(10 * hourly + 10, visitor.id)
        counted = [
            run["created_at"]
            for run in runs
            if run["created_at"] >= now - HOUR_S and run["requests"] > (run["failed"] or 0) + (run["cancelled"] or 0)
        ]
        return max(1, math.ceil(min(counted) + HOUR_S - now)) if counted else QUEUE_RETRY_S

    # ---- reading --------------------------------------------------------------------------------------------
    def find(self, video_id: str, visitor: Visitor) -> Found:
        """The video, where the caller may see it; raises a 404 that tells nothing of another visitor's."""
        found = self.controller.board.find(video_id)
        if found is not None and found[1].id == video_id:
            view = found[1]
            if visitor.operator or view.visitor_id == visitor.id:
                return Found(view=view)
            raise not_found(video_id)
        store = self.controller.store
        row = store.request_row(video_id)
        if row is None or not (visitor.operator or store.owner_of(video_id) == visitor.id):
            raise not_found(video_id)
        return Found(row=row)

    def record(self, found: Found, visitor: Visitor) -> JobRecord:
        if found.view is not None:
            percent = self.controller.board.progress(found.view).percent
            return records.record_of_view(found.view, percent, visitor.operator, self.model_name)
        return records.record_of_row(found.row, visitor.operator, self.model_name)

    def retrieve(self, video_id: str, visitor: Visitor) -> JobRecord:
        return self.record(self.find(video_id, visitor), visitor)

    def page(self, visitor: Visitor, after: str | None, limit: int, order: Literal["asc", "desc"] = "desc") -> JobList:
        """GET /v1/videos: the caller's own videos (a bench's aside), newest first or oldest first, from after the
        video `after` names."""
        if not 0 <= limit <= MAX_PAGE:
            raise GatewayProblem(400, f"limit must be from 0 to {MAX_PAGE}, got {limit}", "limit")
        store = self.controller.store
        start_run = None
        if after:
            row = store.request_row(after)
            if row is None or store.owner_of(after) != visitor.id:
                raise GatewayProblem(400, f"after: no video {after[:80]!r} of yours", "after")
            start_run = row["run_id"]
        live = {view.id: view for view in self.controller.board.views(visitor)}
        taken: list[JobRecord] = []
        for row in self._rows(visitor, order, start_run, after):
            if len(taken) > limit:
                break
            view = live.get(row["id"])
            found = Found(view=view) if view is not None else Found(row=row)
            taken.append(self.record(found, visitor))
        return JobList.page(taken[:limit], has_more=len(taken) > limit)

    def _rows(self, visitor: Visitor, order: str, start_run: str | None, after: str | None) -> Iterator[dict]:
        """The caller's requests in order, each run's read only once the page reaches it."""
        store = self.controller.store
        runs = store.recent_runs(1_000_000, visitor.id, RunFilter())
        if order == "asc":
            runs.reverse()
        if start_run is not None:
            ids = [run["id"] for run in runs]
            runs = runs[ids.index(start_run) :] if start_run in ids else []
        for run in runs:
            rows = store.run_requests(run["id"], visitor.id)
            if order == "desc":
                rows.reverse()
            if after is not None and run["id"] == start_run:
                ids = [row["id"] for row in rows]
                rows = rows[ids.index(after) + 1 :] if after in ids else []
            yield from rows

    def content(self, video_id: str, visitor: Visitor) -> Path:
        """GET /v1/videos/{id}/content: the mp4, once made."""
        found = self.find(video_id, visitor)
        record = self.record(found, visitor)
        if record.status is JobStatus.FAILED:
            message = record.error.message if record.error else "the request failed"
            raise GatewayProblem(422, f"Video {video_id} failed: {message}")
        path = found.video_path
        if record.status is not JobStatus.COMPLETED or path is None:
            raise GatewayProblem(404, "Generation is still in-progress")
        if not path.is_file():
            raise GatewayProblem(404, f"the video of {video_id} is no longer in the studio's outputs folder")
        return path

    # ---- ending ---------------------------------------------------------------------------------------------
    async def delete(self, video_id: str, visitor: Visitor) -> JobDeleted:
        """DELETE /v1/videos/{id}: a request under way is cancelled (answered once it has stopped, 409 where that
        takes longer than CANCEL_WAIT_S); a finished one stays in History, and says so (deleted: false)."""
        found = self.find(video_id, visitor)
        view = found.view
        if view is None or view.state.finished:
            return JobDeleted(id=video_id, deleted=False)
        try:
            self.controller.board.cancel(view.id, by=visitor)
        except NotYours:
            raise not_found(video_id) from None
        if not await self._finished(view, CANCEL_WAIT_S):
            raise GatewayProblem(409, f"Video {video_id} is still stopping: ask again in a moment")
        return JobDeleted(id=video_id, deleted=view.state is RequestState.CANCELLED)

    async def _finished(
        self, view: RequestView, within_s: float, gone: Callable[[], Awaitable[bool]] | None = None
    ) -> bool:
        """Whether the request ended within `within_s` (and before its caller, where `gone` tells, went away)."""
        deadline = time.monotonic() + within_s
        while not view.state.finished:
            if time.monotonic() >= deadline or (gone is not None and await gone()):
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def sync(
        self,
        form: Mapping[str, Any],
        upload: Upload | None,
        visitor: Visitor,
        gone: Callable[[], Awaitable[bool]],
    ) -> tuple[RequestView, JobRecord]:
        """POST /v1/videos/sync: the request made and waited for (SYNC_TIMEOUT_S at most, its queue wait
        included). A caller that goes away cancels it; one that waits too long is told its id to follow it."""
        view = await self.create(form, upload, visitor)
        if not await self._finished(view, SYNC_TIMEOUT_S, gone):
            if await gone():
                self.controller.board.cancel(view.id, by=visitor)
                raise GatewayProblem(499, "the caller went away: the request was cancelled")
            raise GatewayProblem(
                504,
                f"the video is still being made after {SYNC_TIMEOUT_S:.0f} s: follow it with GET /v1/videos/{view.id}",
            )
        record = records.record_of_view(view, 100.0, visitor.operator, self.model_name)
        if view.state is RequestState.CANCELLED:
            raise GatewayProblem(409, f"Video {view.id} was cancelled")
        if record.status is JobStatus.FAILED:
            code = records.http_status(record)
            raise GatewayProblem(code, record.error.message if record.error else "the request failed")
        return view, record
