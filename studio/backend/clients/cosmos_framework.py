"""One request against one Cosmos Framework Ray Serve server (`cosmos_framework.inference.ray.serve`).

Its contract (docs: cosmos-framework-serve-api) is not vLLM-Omni's: one synchronous `POST /generate` with a JSON
body that answers once the video is made, the mp4 then fetched from `/outputs/<file>`; tiers as "256"/"480"/"720",
aspects as "16,9"; guardrails set when the server starts; no job id, no progress, no cancel. This client gives
the studio's run machinery the interface of `VideoClient` (run, follow, retrieve, healthy, close), mapping the one
call to the studio's job model as far as a client can know it:

- a synthetic job record, queued until the request is wholly delivered, then "in progress" (at the server: queued
  or running there, it does not say) until it answers, then completed or failed. Its progress stays 0: the page
  shows the studio's estimate from earlier requests of the same shape, marked as such;
- timings: only the end-to-end latency (sent to mp4 on disk). Queue wait and inference cannot be told apart, so
  `completed` is left unset and both stay None rather than being guessed;
- cancel: the studio stops waiting; the server has no cancel and finishes the video anyway;
- a request that lost its server after delivery is never sent again (it may still be made there), and a studio
  restart cannot follow it up (there is no job id to ask about).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from studio import tiers
from studio.backend.clients.base import (
    ClientError,
    JobOutcome,
    JobTimeout,
    RequestRejected,
    RequestTimings,
    ServerClient,
    ServerUnreachable,
    UpdateCallback,
    notify,
    save_stream,
)
from studio.backend.clients.http import async_client, tls_context
from studio.backend.engine_kinds import COSMOS_FRAMEWORK_JOB_ID_PREFIX as JOB_ID_PREFIX
from studio.backend.engine_kinds import GUARDRAILS_AT_START as GUARDRAILS_AT_START
from studio.backend.engine_kinds import LATENCY_ONLY as LATENCY_ONLY
from studio.backend.engine_kinds import NO_CANCEL, NO_UPLOAD
from studio.backend.engine_kinds import NO_PROGRESS as NO_PROGRESS
from studio.protocol import (
    JobError,
    JobRecord,
    JobStatus,
    PreviewEvent,
    ProgressEvent,
    VideoRequest,
    error_message,
    is_guardrail_block,
)

log = logging.getLogger(__name__)

# This engine's name, its job ids' prefix and what it cannot do are its record's (studio.backend.engine_kinds).
CONNECT_TIMEOUT_S = 10.0

NO_FOLLOW_UP = (
    "the Cosmos Framework server gives no job id to follow a request by; it may still have made the video "
    "(its output folder)"
)
# Keys of the request body (OmniSampleOverrides) a caller may add through extra_params; any other is refused
# here, as the server would refuse it with a 422.
EXTRA_BODY_KEYS = frozenset({"model_mode", "vision_path", "shift", "enable_sound"})


def server_base(url: str) -> str:
    """http://host:port of a server URL (a trailing /v1, as the studio's other servers are given, is dropped)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")


def tier_and_aspect(request: VideoRequest) -> tuple[str, str]:
    """The server's `resolution` ("480") and `aspect_ratio` ("16,9") for the request's frame size."""
    found = tiers.tier_and_aspect_of_size(request.width, request.height)
    if found is not None:
        tier, aspect = found
        return tier.removesuffix("p"), aspect.replace(":", ",")
    raise RequestRejected(
        f"size {request.size} is no Cosmos 3 tier and aspect: the Cosmos Framework server takes a tier "
        f"({', '.join(tiers.TIERS)}) and an aspect ({', '.join(tiers.ASPECTS)}), not pixels"
    )


def _reference_url(reference: str | None, key: str) -> str | None:
    """The URL of an image_reference / video_reference ({"image_url": ...} as JSON, or the URL itself)."""
    if not reference:
        return None
    try:
        value = json.loads(reference)
    except ValueError:
        return reference
    if isinstance(value, dict):
        found = value.get(key)
        return found.get("url") if isinstance(found, dict) else found
    return str(value)


def generate_body(request: VideoRequest, name: str) -> dict[str, Any]:
    """The JSON body of POST /generate for a studio request. Raises RequestRejected for what this server
    cannot be asked (guardrails off per request, an upload, an unknown extra key, a size that is no tier)."""
    extra = dict(request.extra_params)
    if extra.pop("guardrails", True) is not True:
        raise RequestRejected(GUARDRAILS_AT_START)
    unknown = sorted(set(extra) - EXTRA_BODY_KEYS)
    if unknown:
        raise RequestRejected(f"the Cosmos Framework server takes no {', '.join(unknown)}")
    if request.input_reference is not None:
        raise RequestRejected(NO_UPLOAD)
    resolution, aspect = tier_and_aspect(request)
    image = _reference_url(request.image_reference, "image_url")
    video = _reference_url(request.video_reference, "video_url")
    vision = extra.pop("vision_path", None) or image or video
    mode = extra.pop("model_mode", None)
    if mode is None and vision is not None:  # else the server infers it (text-to-video)
        mode = "video2video" if vision == video else "image2video"
    body: dict[str, Any] = {
        "name": name,
        "prompt": request.prompt,
        "negative_prompt": request.negative_prompt,
        "seed": request.seed,
        "model": request.model,
        "model_mode": mode,
        "resolution": resolution,
        "aspect_ratio": aspect,
        "fps": request.fps,
        "num_frames": request.num_frames,
        "num_steps": request.num_inference_steps,
        "guidance": request.guidance_scale,
        "shift": request.flow_shift,
        "enable_sound": request.generate_sound,
        "vision_path": vision,
        **extra,
    }
    # Left out, a field takes the server's default (35 steps, guidance 6, 189 frames, 24 fps, 16,9).
    return {key: value for key, value in body.items() if value is not None}


def _guardrail_message(message: str) -> str:
    """The server's words, marked as a guardrail block where they are one (the studio's marker phrase)."""
    text = message.lower()
    if "guardrail" in text and ("block" in text or "unsafe" in text) and not is_guardrail_block(message):
        return f"blocked by the server's guardrails: {message}"
    return message


class CosmosFrameworkClient(ServerClient):
    """Speaks to one Cosmos Framework server, with `VideoClient`'s interface. Safe to share between concurrent
    requests (each call opens its own connection: a call lasts minutes, so pooling saves nothing). Of the shared
    options, `poll_interval_s` and `max_retries` go unused: nothing is polled here, and a generate call is never
    retried (a retry after a lost answer would make the video twice)."""

    server_url = staticmethod(server_base)

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    # ---- the server's read-only routes --------------------------------------------------------------
    async def served_models(self, timeout_s: float = 5.0) -> list[str]:
        """GET /models: the names it serves (a model started from the CLI is named "")."""
        try:
            async with async_client(timeout_s) as http:
                response = await http.get(self.base_url + "/models", headers=self._headers)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"cannot reach {self.base_url}: {exc}") from exc
        if response.status_code != 200:
            raise RequestRejected(f"HTTP {response.status_code}: {error_message(response.content)}")
        names = response.json()
        if not isinstance(names, list):
            raise ClientError(f"{self.base_url}/models answered {str(names)[:200]!r}, not a list of names")
        return [str(name) for name in names]

    async def healthy(self, timeout_s: float = 5.0) -> bool:
        """GET /models answers 200 (the server has no health route; /info may answer 500 in a working server)."""
        try:
            async with async_client(timeout_s) as http:
                return (await http.get(self.base_url + "/models", headers=self._headers)).status_code == 200
        except httpx.HTTPError:
            return False

    # ---- a whole request ----------------------------------------------------------------------------
    async def run(
        self,
        request: VideoRequest,
        dest: Path,
        on_update: UpdateCallback | None = None,
        timeout_s: float = 3600.0,
        timings: RequestTimings | None = None,
        on_accepted: Callable[[JobRecord], None] | None = None,
        on_event: Callable[[ProgressEvent | PreviewEvent], None] | None = None,  # never called: it tells no steps
    ) -> JobOutcome:
        """POST /generate and wait for the answer (at most `timeout_s`), then download the mp4 to `dest`.
        Cancelling the task stops the waiting only: the server has no cancel and finishes the video."""
        timings = timings or RequestTimings()
        name = f"{Path(dest).stem}_{uuid.uuid4().hex[:6]}"
        body = generate_body(request, name)
        record = JobRecord(
            id=JOB_ID_PREFIX + name,
            status=JobStatus.QUEUED,
            model=request.model,
            prompt=request.prompt,
            size=request.size,
            fps=request.fps,
            num_frames=request.num_frames,
        )
        delivered = False

        async def trace(event: str, info: dict[str, Any]) -> None:
            # The whole request is at the server: from now on it may be making the video, so a lost connection
            # must not send it anywhere else.
            nonlocal delivered, record
            if event.endswith("send_request_body.complete") and not delivered:
                delivered = True
                timings.accepted = timings.first_running = time.time()
                record = record.model_copy(update={"status": JobStatus.IN_PROGRESS, "created_at": timings.accepted})
                if on_accepted is not None:
                    on_accepted(record)
                await notify(on_update, record)

        timings.sent = time.time()
        await notify(on_update, record)
        timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S, write=self.http_timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                async with httpx.AsyncClient(timeout=timeout, verify=tls_context()) as http:
                    response = await http.post(
                        self.base_url + "/generate", json=body, headers=self._headers, extensions={"trace": trace}
                    )
        except asyncio.CancelledError:
            if delivered:
                log.warning("stopped waiting for %s at %s: %s", record.id, self.base_url, NO_CANCEL)
            raise
        except (TimeoutError, httpx.TimeoutException) as exc:
            if not delivered and isinstance(exc, httpx.ConnectTimeout):
                raise ServerUnreachable(f"cannot reach {self.base_url}: connection timed out") from exc
            raise JobTimeout(
                f"{self.base_url} made no answer within {timeout_s:.0f} s; the server has no cancel and may "
                "still make the video"
            ) from exc
        except httpx.HTTPError as exc:
            if not delivered:  # nothing reached the server: another one may take the request
                raise ServerUnreachable(f"cannot reach {self.base_url}: {exc or type(exc).__name__}") from exc
            raise ClientError(
                f"{self.base_url} broke off the request while making the video (did the server stop?): "
                f"{exc or type(exc).__name__}; it is not sent again, as the server may still make it"
            ) from exc
        answered = time.time()
        record = self._answer_record(record, response, answered)
        await notify(on_update, record)
        if record.status is not JobStatus.COMPLETED:
            return JobOutcome(record=record, timings=timings)
        assert record.file_name is not None
        await self.download(record.file_name, dest)
        # `completed` stays unset: with it, the bounds of RequestTimings would read a queue wait of 0 and an
        # inference of the whole call, which this server cannot tell.
        timings.downloaded = time.time()
        return JobOutcome(record=record, timings=timings, video_path=Path(dest))

    def _answer_record(self, record: JobRecord, response: httpx.Response, answered: float) -> JobRecord:
        """The synthetic job record once the server answered: completed with its file, or failed with its words.
        Raises RequestRejected for a request it refused (404 model, 422 validation)."""
        status = response.status_code
        if 400 <= status < 500:  # refused: 404 an unknown model, 422 a bad field
            message = error_message(response.content, fallback=f"HTTP {status}")
            if status != 404:
                what = "refused the request"
            elif message.startswith("Model "):
                what = "has no such model"
            else:  # no /generate route at all: another kind of server
                what = "has no POST /generate (is it a Cosmos Framework server?)"
            raise RequestRejected(f"the server {what} (HTTP {status}): {message}", status)
        if status != 200:  # a worker failure, a guardrail block, the server's 300 s batch timeout
            message = error_message(response.content, fallback=f"HTTP {status}")
            return self._failed(record, _guardrail_message(message or "the worker failed"), status, answered)
        try:
            answer = response.json()
            outcome = str(answer["status"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ClientError(
                f"{self.base_url} answered with something that is not a sample's outputs: {response.text[:200]!r}"
            ) from exc
        details = {"server_status": outcome, "server_message": answer.get("message"), "args": answer.get("args")}
        if outcome != "success":
            message = str(answer.get("message") or f"the server's sample ended {outcome}")
            if outcome == "skip":
                message = f"the server skipped the sample: {message}"
            return self._failed(record, _guardrail_message(message), None, answered, details)
        files = [str(f) for out in answer.get("outputs") or [] for f in (out.get("files") or [])]
        videos = [f for f in files if f.endswith(".mp4")]
        if not videos:
            return self._failed(record, f"the server answered success but sent no mp4 (files: {files})", None, answered)
        return record.model_copy(
            update={
                "status": JobStatus.COMPLETED,
                "progress": 100,
                "completed_at": answered,
                "file_name": videos[0],
                "media_type": "video/mp4",
                **details,
            }
        )

    @staticmethod
    def _failed(
        record: JobRecord, message: str, code: int | None, answered: float, details: dict[str, Any] | None = None
    ) -> JobRecord:
        return record.model_copy(
            update={
                "status": JobStatus.FAILED,
                "completed_at": answered,
                "error": JobError(code=code, message=message),
                **(details or {}),
            }
        )

    async def download(self, file: str, dest: Path) -> int:
        """Stream GET /outputs/<file> to dest (save_stream). Returns its size in bytes."""
        url = f"{self.base_url}/outputs/{file.lstrip('/')}"
        try:
            async with async_client(self.http_timeout_s) as http, http.stream("GET", url, headers=self._headers) as r:
                if r.status_code != 200:
                    await r.aread()
                    raise RequestRejected(
                        f"the server made the video but could not send it from {url} "
                        f"(HTTP {r.status_code}): {error_message(r.content)}",
                        r.status_code,
                    )
                return await save_stream(r.aiter_bytes(), dest)
        except httpx.HTTPError as exc:
            raise ClientError(f"download of {url} broke off: {exc or type(exc).__name__}") from exc

    # ---- what VideoClient can do and this server cannot ------------------------------------------------
    async def follow(
        self,
        record: JobRecord,
        dest: Path,
        on_update: UpdateCallback | None = None,
        timeout_s: float = 3600.0,
        timings: RequestTimings | None = None,
        on_event: Callable[[ProgressEvent | PreviewEvent], None] | None = None,  # never called: it tells no steps
    ) -> JobOutcome:
        """A request of an earlier studio cannot be followed: there is no job to ask about."""
        raise ClientError(NO_FOLLOW_UP)

    async def retrieve(self, job_id: str) -> JobRecord:
        raise ClientError(NO_FOLLOW_UP)

    async def cancel(self, job_id: str) -> bool:
        """The server has no cancel: False, as for a job the server no longer knows."""
        return False
