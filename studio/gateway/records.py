"""A studio request as the contract's job record (protocol.JobRecord): from the board, while the request is in this
studio's memory, or from a History row, once it is not.

The record's id is the studio's request id. Its status folds the studio's states into the contract's four: waiting
in the studio and queued at a server are `queued`; running and downloading are `in_progress`; done is `completed`;
failed, lost and cancelled are `failed`, the error's code saying which (400 for a guardrail's block, 500 for any
other failure, "cancelled" for a cancel). A visitor reads errors with no server address or path in them, as on the
page (public_text); operators read them whole.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from studio.backend.face import RequestState, RequestView, for_visitors
from studio.protocol import DEFAULT_FPS, JobError, JobRecord, JobStatus, is_guardrail_block

MEDIA_TYPE = "video/mp4"
CANCELLED = "cancelled"
LOST = "lost"  # History's state of a request an earlier studio lost

STATUS_OF: dict[str, JobStatus] = {
    RequestState.WAITING: JobStatus.QUEUED,
    RequestState.QUEUED: JobStatus.QUEUED,
    RequestState.RUNNING: JobStatus.IN_PROGRESS,
    RequestState.DOWNLOADING: JobStatus.IN_PROGRESS,
    RequestState.DONE: JobStatus.COMPLETED,
    RequestState.FAILED: JobStatus.FAILED,
    RequestState.CANCELLED: JobStatus.FAILED,
    LOST: JobStatus.FAILED,
}


def failure(state: str, error: str | None, operator: bool) -> JobError | None:
    """The record's error for a request that ended without a video; None for any other."""
    if STATUS_OF.get(state) is not JobStatus.FAILED:
        return None
    message = (error if operator else for_visitors(error)) or f"the request ended {state}"
    if state == RequestState.CANCELLED:
        return JobError(code=CANCELLED, message=message)
    return JobError(code=400 if is_guardrail_block(error) else 500, message=message)


def http_status(record: JobRecord) -> int:
    """What a record is answered with: a failed job's own code (400 for a guardrail block, 500 for an engine error),
    as vLLM-Omni answers it; 200 for any other, a cancelled one included (it is no failure of the server's)."""
    if record.status is JobStatus.FAILED and record.error is not None and isinstance(record.error.code, int):
        return record.error.code
    return 200


def _seconds(frames: int | None, fps: int | None) -> str | None:
    """The contract's `seconds`: whole seconds, as its form takes them (the exact length is `duration_s`)."""
    return None if not frames else str(max(1, math.ceil(frames / (fps or DEFAULT_FPS))))


def _shape(parameters: dict[str, Any], model: str) -> dict[str, Any]:
    """`model`: the studio's model, for a request that named none (the server's own then made it)."""
    frames, fps = parameters.get("num_frames"), parameters.get("fps") or DEFAULT_FPS
    return {
        "model": parameters.get("model") or model,
        "size": parameters.get("size") or f"{parameters.get('width')}x{parameters.get('height')}",
        "seconds": _seconds(frames, fps),
        "num_frames": frames,
        "fps": fps,
        "duration_s": round(frames / fps, 3) if frames else None,
    }


def server_figures(sidecar: Path | None) -> dict[str, Any]:
    """What the server reported of a video's making beyond the studio's timings (its stage durations, its peak
    memory), as the video's sidecar keeps its job record; nothing where the server reported none."""
    if sidecar is None:
        return {}
    try:
        job = json.loads(Path(sidecar).read_text(encoding="utf-8")).get("job") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {name: job[name] for name in ("stage_durations", "peak_memory_mb") if job.get(name) is not None}


def _whole(instant: float | None) -> int | None:
    return None if instant is None else int(instant)


def record_of_view(view: RequestView, percent: float, operator: bool, model: str) -> JobRecord:
    """A request on the board; `percent`: its progress as the page shows it (the board's, estimated where the
    server tells none)."""
    state = str(view.state)
    status = STATUS_OF[state]
    done = view.state is RequestState.DONE
    return JobRecord(
        id=view.id,
        prompt=view.request.prompt,
        status=status,
        progress=100 if done else min(99, int(percent)) if status is JobStatus.IN_PROGRESS else 0,
        created_at=_whole(view.timings.created),
        completed_at=_whole(view.finished_at) if done else None,
        error=failure(state, view.error, operator),
        media_type=MEDIA_TYPE,
        file_name=view.video_path.name if done and view.video_path else None,
        inference_time_s=view.timings.inference_s if done else None,
        **_shape(view.request.parameters(), model),
        **(server_figures(view.sidecar_path) if done else {}),
    )


def record_of_row(row: dict[str, Any], operator: bool, model: str) -> JobRecord:
    """A request as History has it (OutputStore's row)."""
    state = str(row["state"])
    status = STATUS_OF.get(state, JobStatus.FAILED)
    timings = row.get("timings") or {}
    done = status is JobStatus.COMPLETED
    video = Path(row["video_path"]) if row.get("video_path") else None
    return JobRecord(
        id=row["id"],
        prompt=row["prompt"],
        status=status,
        progress=100 if done else 0,
        created_at=_whole(row.get("created_at")),
        completed_at=_whole(timings.get("downloaded") or timings.get("completed")) if done else None,
        error=failure(state, row.get("error"), operator),
        media_type=MEDIA_TYPE,
        file_name=video.name if done and video else None,
        inference_time_s=timings.get("inference_s") if done else None,
        **_shape(row.get("parameters") or {}, model),
        **(server_figures(Path(row["sidecar_path"])) if done and row.get("sidecar_path") else {}),
    )
