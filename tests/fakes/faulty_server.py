"""A misbehaving video server, for the fault tests. TEST DOUBLE.

The real servers (the embedded engine, vLLM-Omni) cannot be made to answer 500s, garbage JSON or broken
mp4s on demand, so this one does. It speaks the contract of studio.protocol (routes, multipart form validated
into the request, job record, error envelope, status codes) except for the one fault its --mode names:

  ok            a well-formed 5-frame 64x64 mp4 (control)
  create-500    POST /v1/videos answers 500 with the error envelope
  garbage-json  GET /v1/videos/{id} answers 200 with a body that is not JSON
  truncated     /content sends the first half of the mp4
  not-mp4       /content sends text labelled video/mp4
  wrong-frames  /content sends a well-formed mp4 with 3 frames instead of the 5 asked

Run: python -m tests.fakes.faulty_server --port P --mode MODE
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from studio.media import encode_mp4
from studio.protocol import (
    DEFAULT_SECONDS,
    ErrorInfo,
    ErrorResponse,
    JobDeleted,
    JobRecord,
    JobStatus,
    VideoRequest,
)


def answer(body: BaseModel, status: int = 200) -> Response:
    return Response(body.model_dump_json(), status_code=status, media_type="application/json")


def build_app(mode: str) -> FastAPI:
    app = FastAPI()
    jobs: dict[str, JobRecord] = {}
    folder = Path(tempfile.mkdtemp(prefix="faulty-"))
    good = folder / "good.mp4"
    encode_mp4(np.zeros((5, 64, 64, 3), np.uint8), 24, good)
    short = folder / "short.mp4"
    encode_mp4(np.zeros((3, 64, 64, 3), np.uint8), 24, short)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "healthy"}

    @app.post("/v1/videos")
    async def create(request: Request) -> Response:
        try:
            video = VideoRequest.model_validate(VideoRequest.form_values(await request.form()))
        except ValidationError as exc:
            return answer(ErrorResponse.invalid_request(exc), 400)
        if mode == "create-500":
            # What vLLM answers when its engine core fails.
            error = ErrorInfo(message="EngineCore encountered an issue.", type="InternalServerError", code=500)
            return answer(ErrorResponse(error=error), 500)
        job_id = f"video_gen_{uuid.uuid4().hex}"
        now = int(time.time())
        # Finished as soon as it is made: the POST answers it queued, every GET completed.
        jobs[job_id] = JobRecord(
            id=job_id,
            status=JobStatus.COMPLETED,
            progress=100,
            prompt=video.prompt,
            size=video.size,
            seconds=video.seconds or str(DEFAULT_SECONDS),
            created_at=now,
            completed_at=now,
            media_type="video/mp4",
            file_name=f"{job_id}.mp4",
            inference_time_s=0.01,
        )
        return answer(jobs[job_id].model_copy(update={"status": JobStatus.QUEUED, "progress": 0, "file_name": None}))

    @app.get("/v1/videos/{job_id}")
    async def retrieve(job_id: str) -> Response:
        if job_id not in jobs:
            return answer(ErrorResponse.of(404, "Video not found"), 404)
        if mode == "garbage-json":
            return Response(b"<html>proxy error</html>{", media_type="application/json")
        return answer(jobs[job_id])

    @app.get("/v1/videos/{job_id}/content")
    async def content(job_id: str) -> Response:
        data = good.read_bytes()
        if mode == "truncated":
            data = data[: len(data) // 2]
        elif mode == "not-mp4":
            data = b"this is not a video"
        elif mode == "wrong-frames":
            data = short.read_bytes()
        return Response(data, media_type="video/mp4")

    @app.delete("/v1/videos/{job_id}")
    async def delete(job_id: str) -> Response:
        jobs.pop(job_id, None)
        return answer(JobDeleted(id=job_id))

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(args.mode), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
