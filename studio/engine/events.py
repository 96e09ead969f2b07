"""A job's events as server-sent events (GET /v1/videos/{video_id}/events): the studio's extension of the contract.

The worker thread moves jobs (a denoising step, a new preview, a new state); `JobWatch.moved` wakes the streams
that follow the job, on their own event loops. Each stream sends what changed since it last looked, in this order:
progress, preview, record. A client that connects late gets the latest progress first, then the latest preview,
then the job's record; the stream ends after the record of a finished job (completed, or failed: a cancel is a
failure with code 499). Polling clients are not affected.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

from studio.engine.previews import PreviewImage
from studio.protocol import EventType, JobRecord, JobStatus, PreviewEvent, ProgressEvent, server_sent_event

# A stream with nothing new says so now and then (an SSE comment), so that proxies keep it open, and looks again.
KEEPALIVE_S = 15.0
FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED)


class JobWatch:
    """Who follows which job: woken from any thread when it moves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followers: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def follow(self, job_id: str) -> asyncio.Event:
        """An event set whenever the job moves (from now on), for the caller's event loop."""
        woken = asyncio.Event()
        with self._lock:
            self._followers.setdefault(job_id, []).append((asyncio.get_running_loop(), woken))
        return woken

    def leave(self, job_id: str, woken: asyncio.Event) -> None:
        with self._lock:
            followers = [pair for pair in self._followers.get(job_id, []) if pair[1] is not woken]
            if followers:
                self._followers[job_id] = followers
            else:
                self._followers.pop(job_id, None)

    def moved(self, job_id: str) -> None:
        """The job moved (a step, a state): its followers look again. From any thread."""
        with self._lock:
            followers = list(self._followers.get(job_id, ()))
        for loop, woken in followers:
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:  # that follower's loop has closed: it follows nothing any more
                continue


async def job_events(
    job_id: str,
    watch: JobWatch,
    progress: Callable[[], ProgressEvent | None],
    record: Callable[[], JobRecord],
    preview: Callable[[], PreviewImage | None] = lambda: None,
    keepalive_s: float = KEEPALIVE_S,
) -> AsyncIterator[bytes]:
    """The job's stream: its progress at each step, each new preview, its record at each change of state, until it
    has finished."""
    woken = watch.follow(job_id)
    sent_step: int | None = None
    sent_preview: int | None = None
    sent_status: JobStatus | None = None
    try:
        while True:
            woken.clear()  # before reading: a move from here on wakes the next wait
            step = progress()
            if step is not None and step.step != sent_step:
                sent_step = step.step
                yield server_sent_event(EventType.PROGRESS, step)
            image = preview()
            if image is not None and image.step != sent_preview:
                sent_preview = image.step
                yield server_sent_event(EventType.PREVIEW, PreviewEvent(step=image.step, image=image.data_url()))
            now = record()
            if now.status is not sent_status:
                sent_status = now.status
                yield server_sent_event(EventType.STATUS, now)
            if now.status in FINISHED:
                return
            try:
                await asyncio.wait_for(woken.wait(), timeout=keepalive_s)
            except TimeoutError:
                yield b": still working\n\n"
    finally:
        watch.leave(job_id, woken)
