"""The Cosmos Framework's Ray Serve server (`cosmos_framework.inference.ray.serve`), as its HTTP contract says it
answers. TEST DOUBLE.

The real server needs CUDA GPUs and a Cosmos 3 checkpoint, so the tests cannot run it. This double follows the
contract page (docs: cosmos-framework-serve-api) exactly, traps included:

- POST /generate is synchronous: it answers only once the sample is made (`--delay` seconds, one request at a
  time, as one replica batching one request), and a client that goes away does not stop the work;
- the body is OmniSampleOverrides: an unknown key, a bad enum or range, or a vision_path file that is missing
  answers 422 (FastAPI's validation detail); an unknown model 404 with the models it has;
- a worker failure answers 500 with a text body (prompts with "guardrail-unsafe" are blocked by the guardrails
  when the server runs with them; prompts with "worker-crash" fail in the worker), or, with --keep-going,
  200 with `status: "error"`;
- a vision_path that is an http(s) URL is fetched by the worker, as the server fetches its input: one it
  cannot fetch is a worker failure (500, or `status: "error"` with --keep-going);
- the video is a real mp4 (small frames, the asked frame count) under the output folder, fetched from
  GET /outputs/<run folder>/vision.mp4; GET /models lists the models ("" for one started from the CLI);
  GET /info answers 500, as it may in that release; there is no /health, no job id, no progress, no cancel.

For the tests, not the contract: `--record FILE` appends each POST /generate body to FILE as it arrived, one a
line, before anything checks it (what a client sent, refused or not).

Run: python -m tests.fakes.cosmos_framework_server --port P [--delay S] [--keep-going] [--no-guardrails]
     [--model NAME ...] [--output-dir DIR] [--record FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator

from studio.media import encode_mp4

UNSAFE_WORD = "guardrail-unsafe"
CRASH_WORD = "worker-crash"
# Tier and aspect to pixels, as the real server's resolution table; the double writes frames an eighth as big.
SIZES = {
    "256": {"1,1": (256, 256), "4,3": (320, 256), "3,4": (256, 320), "16,9": (320, 192), "9,16": (192, 320)},
    "480": {"1,1": (640, 640), "4,3": (736, 544), "3,4": (544, 736), "16,9": (832, 480), "9,16": (480, 832)},
    "720": {"1,1": (960, 960), "4,3": (1104, 832), "3,4": (832, 1104), "16,9": (1280, 720), "9,16": (720, 1280)},
    "768": {"1,1": (768, 768), "4,3": (896, 672), "3,4": (672, 896), "16,9": (1024, 576), "9,16": (576, 1024)},
}


class OmniSampleOverrides(BaseModel):
    """The body of POST /generate: every field optional, unknown keys refused."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    prompt: str | None = None
    negative_prompt: str | None = None
    seed: int | None = None
    model: str | None = None
    model_mode: Literal["text2video", "image2video", "video2video", "text2image", "image2image"] | None = None
    resolution: Literal["256", "480", "720", "768"] | None = None
    aspect_ratio: Literal["1,1", "4,3", "3,4", "16,9", "9,16"] | None = None
    fps: int | None = Field(default=None, ge=1)
    num_frames: int | None = Field(default=None, gt=0)
    num_steps: int | None = Field(default=None, ge=1)
    guidance: float | None = Field(default=None, ge=0, le=7)
    shift: float | None = None
    enable_sound: bool | None = None
    vision_path: str | None = None

    @field_validator("vision_path")
    @classmethod
    def _vision_exists(cls, path: str | None) -> str | None:
        if path is None or path.startswith(("http://", "https://", "s3://")) or Path(path).exists():
            return path
        raise ValueError(f"file not found: {path}")


class BodyRecorder:
    """ASGI middleware: each POST /generate body, whole and as received, appended to `path` as one line."""

    def __init__(self, app: Any, path: Path):
        self.app = app
        self.path = path

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/generate"):
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []

        async def recording_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    with self.path.open("ab") as handle:
                        handle.write(b"".join(chunks).replace(b"\n", b" ") + b"\n")
            return message

        return await self.app(scope, recording_receive, send)


def build_app(
    output_dir: Path,
    delay_s: float,
    keep_going: bool,
    guardrails: bool,
    models: list[str],
    record: Path | None = None,
) -> FastAPI:
    app = FastAPI()
    if record is not None:
        app.add_middleware(BodyRecorder, path=record)
    output_dir.mkdir(parents=True, exist_ok=True)
    one_at_a_time = asyncio.Lock()  # one replica, one request per batch

    @app.get("/models")
    async def list_models() -> list[str]:
        return models

    @app.get("/info")
    async def info() -> PlainTextResponse:
        # The release asks for a package version under a name that is not installed.
        return PlainTextResponse("Internal Server Error", status_code=500)

    @app.post("/generate")
    async def generate(overrides: OmniSampleOverrides) -> JSONResponse:
        if overrides.model is not None and overrides.model not in models:
            raise HTTPException(404, f"Model '{overrides.model}' not found. Available models: {models}")
        # The work runs to its end whatever the client does: shielded from the client's disconnect.
        return await asyncio.shield(make(overrides))

    async def make(overrides: OmniSampleOverrides) -> JSONResponse:
        async with one_at_a_time:
            await asyncio.sleep(delay_s)
            args = resolved(overrides)
            prompt = overrides.prompt or ""
            failure = None
            if guardrails and UNSAFE_WORD in prompt:
                failure = "Guardrail blocked text2video generation: the prompt failed the safety check."
            elif CRASH_WORD in prompt:
                failure = "RuntimeError: CUDA error: an illegal memory access was encountered"
            else:
                failure = await fetch_failure(overrides.vision_path)
            if failure is not None:
                if not keep_going:
                    return PlainTextResponse(f"Internal Server Error: {failure}", status_code=500)
                return JSONResponse(sample(args, "error", failure, [], "Traceback (most recent call last): ..."))
            folder = f"generate_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:4]}"
            await asyncio.to_thread(write_video, output_dir / folder / "vision.mp4", args)
            return JSONResponse(sample(args, "success", "", [f"{folder}/vision.mp4"]))

    app.mount("/outputs", StaticFiles(directory=output_dir), name="outputs")
    return app


async def fetch_failure(vision_path: str | None) -> str | None:
    """Why the worker could not fetch an http(s) vision_path (None: fetched, or nothing to fetch)."""
    if vision_path is None or not vision_path.startswith(("http://", "https://")):
        return None
    try:
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=True) as http:
            response = await http.get(vision_path)
    except httpx.HTTPError as exc:
        return f"RuntimeError: failed to download {vision_path}: {exc or type(exc).__name__}"
    if response.status_code != 200 or not response.content:
        return f"RuntimeError: failed to download {vision_path}: HTTP {response.status_code}"
    return None


def resolved(overrides: OmniSampleOverrides) -> dict[str, object]:
    """The arguments as the server resolves them: its text-to-video defaults for what was left out."""
    args = overrides.model_dump()
    defaults = {"num_steps": 35, "guidance": 6.0, "num_frames": 189, "fps": 24, "resolution": "720"}
    defaults |= {"aspect_ratio": "16,9", "seed": random.randint(0, 10000), "model_mode": "text2video"}
    for key, default in defaults.items():
        if args[key] is None:
            args[key] = default
    return args


def write_video(path: Path, args: dict[str, object]) -> None:
    width, height = SIZES[str(args["resolution"])][str(args["aspect_ratio"])]
    frames = int(args["num_frames"])  # type: ignore[arg-type]
    shade = np.linspace(0, 255, frames, dtype=np.uint8)[:, None, None, None]
    video = np.broadcast_to(shade, (frames, height // 8, width // 8, 3)).copy()
    path.parent.mkdir(parents=True, exist_ok=True)
    encode_mp4(video, int(args["fps"]), path)  # type: ignore[arg-type]


def sample(args: dict[str, object], status: str, message: str, files: list[str], trace: str = "") -> dict:
    """SampleOutputs."""
    outputs = [{"content": {}, "files": files}] if files else []
    return {"args": args, "status": status, "message": message, "stack_trace": trace, "outputs": outputs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds each sample takes")
    parser.add_argument("--keep-going", action="store_true")
    parser.add_argument("--no-guardrails", action="store_true")
    parser.add_argument("--model", action="append", help='a model name (repeatable; default: the CLI\'s "")')
    parser.add_argument("--output-dir", type=Path, default=None)
    parser.add_argument("--record", type=Path, default=None, help="append each POST /generate body to this file")
    args = parser.parse_args()
    output_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="cosmos-serve-"))
    guardrails, models = not args.no_guardrails, args.model or [""]
    app = build_app(output_dir, args.delay, args.keep_going, guardrails, models, args.record)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
