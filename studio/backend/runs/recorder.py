"""What a run writes to the store, and when.

Each request's history row follows it as it moves. A finished video is kept only once it is checked (it plays,
it holds the frames asked) and its sidecar is on disk; the run reports a request done only after its history
row says so (`finished`), so nothing shown is missing from the outputs dir.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import asdict
from typing import Any

from studio.backend.clients.base import JobOutcome
from studio.backend.runs.request_state import RequestView
from studio.backend.runs.store import OutputStore
from studio.backend.visitors import LOCAL_OPERATOR
from studio.media import VideoError, VideoInfo, check_mp4


class RunRecorder:
    """The history of one run's requests, and their kept videos."""

    def __init__(self, store: OutputStore, run_id: str):
        self.store = store
        self.run_id = run_id

    def sent(self, view: RequestView) -> None:
        self.store.update_request(view.id, state=view.state, endpoint=view.endpoint)

    def accepted(self, view: RequestView) -> None:
        self.store.update_request(view.id, job_id=view.job_id)

    def requeued(self, view: RequestView) -> None:
        self.store.update_request(view.id, state=view.state, job_id=None, endpoint=None)

    def finished(self, view: RequestView) -> None:
        try:
            self.store.update_request(
                view.id,
                state=view.state,
                error=view.error,
                timings=view.timings.as_dict(),
                video_path=view.video_path,
                sidecar_path=view.sidecar_path,
            )
        except sqlite3.Error as exc:  # e.g. the disk is full: still report the outcome, and say what is missing
            view.error = f"{view.error or ''} (history not saved: {exc})".strip()

    async def keep_video(self, view: RequestView, outcome: JobOutcome) -> str | None:
        """Check the downloaded mp4 and write its sidecar. Returns why it cannot be kept (the file is then
        removed), or None once it is kept."""
        assert outcome.video_path is not None
        try:
            info = await asyncio.to_thread(check_mp4, outcome.video_path)
        except VideoError as exc:
            outcome.video_path.unlink(missing_ok=True)
            return f"the server sent a video that does not play: {exc}"
        asked = view.request.num_frames
        if asked is not None and info.num_frames != asked:
            outcome.video_path.unlink(missing_ok=True)
            return f"the server sent a video of {info.num_frames} frames, but {asked} were asked"
        # Off the event loop: the sidecar is flushed to disk before it is renamed into place.
        sidecar = self._sidecar(view, outcome, info)
        view.sidecar_path = await asyncio.to_thread(self.store.write_sidecar, outcome.video_path, sidecar)
        view.video_path = outcome.video_path
        return None

    def _sidecar(self, view: RequestView, outcome: JobOutcome, info: VideoInfo) -> dict[str, Any]:
        """The sidecar, which the studio's file route serves to the video's owner. The server's address and what a
        server adds to the job record beyond the contract's fields (the Cosmos Framework's args, its messages) are
        for operators: only the sidecar of the one person at the keyboard (the CLI's, a studio without sign-in)
        holds them; a visitor's leaves them out (the history keeps the address)."""
        job = outcome.record.model_dump(mode="json")
        sidecar = {
            "request_id": view.id,
            "run_id": self.run_id,
            "job_id": outcome.record.id,
            "endpoint": view.endpoint,
            "parameters": view.request.parameters(),
            "seed": view.request.seed,
            "timings": view.timings.as_dict(),
            "job": job,
            "video": asdict(info),
        }
        if view.visitor_id != LOCAL_OPERATOR.id:
            del sidecar["endpoint"]
            for key in outcome.record.model_extra or {}:
                job.pop(key, None)
        return sidecar
