"""An engine to send jobs to over HTTP, as the studio sends them (a POST of the form, then the job's events), and
the flags that say which: a real `python -m studio.engine` on this machine's CPU (the small model), the engine's own
app over the Wan2.1-1.3B-shaped random pipeline on a GPU (served by uvicorn in this process), or one at a URL."""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import ROOT
from studio.backend.servers.supervisor import free_port
from studio.tiers import size_for

TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@dataclass
class Engine:
    url: str
    headers: dict[str, str]
    description: str
    pid: int | None = None  # its process, where its CPU time can be read (it is a process of its own)


@contextlib.contextmanager
def cpu_engine(args: argparse.Namespace) -> Iterator[Engine]:
    """A real engine process, started the way the studio starts it."""
    from studio.backend.servers.launchers import embedded_launch
    from studio.backend.servers.supervisor import ManagedServer
    from studio.config import StudioSettings

    settings = StudioSettings(
        _env_file=None,
        model=args.model,
        engine_threads=args.threads,
        engine_preview_interval_s=args.interval,
        guardrails=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedServer(
            lambda port: embedded_launch(settings, port, output_dir=Path(tmp) / "out"),
            log_path=Path(tmp) / "engine.log",
            init_timeout_s=300,
        )
        server.start()
        try:
            yield Engine(server.base_url, {}, f"python -m studio.engine --model {args.model} (CPU)", server.pid)
        finally:
            server.stop()


@contextlib.contextmanager
def gpu_engine(args: argparse.Namespace) -> Iterator[Engine]:
    """The engine's own app over the Wan2.1-1.3B-shaped random pipeline of benchmarks/harness/wan_model.py, warmed at
    the tier's size as a server warms it, served by uvicorn on a thread of this process."""
    import uvicorn

    from benchmarks.harness.wan_model import build_pipeline
    from studio.engine.api import EngineState, create_app
    from studio.engine.generator import VideoGenerator
    from studio.engine.jobs import JobManager
    from studio.engine.metrics import EngineMetrics
    from studio.engine.previews import PreviewSettings

    pipe, _ = build_pipeline(args.device, smoke=args.smoke)
    generator = VideoGenerator("wan2.1-t2v-1.3b-random", device=args.device)
    generator.load(pipeline=pipe)
    width, height = size_for(args.tier, "16:9")
    generator.warmup([(width, height, args.frames)], max_batch=1)
    with tempfile.TemporaryDirectory() as tmp:
        manager = JobManager(
            generator,
            Path(tmp),
            "bench",
            EngineMetrics("bench"),
            encode_workers=8,
            previews=PreviewSettings(True, args.interval),
        )
        manager.start()
        state = EngineState(
            manager=manager,
            guard=None,
            model_name="bench",
            model_root="bench",
            api_key=None,
            started_at=time.time(),
            default_steps=args.steps,
            default_guidance=args.guidance,
            sync_timeout_s=600,
        )
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            yield Engine(f"http://127.0.0.1:{port}", {}, "the engine's app over Wan2.1-1.3B's shape (random weights)")
        finally:
            server.should_exit = True
            thread.join(30)
            manager.shutdown()
            generator.close()


@contextlib.contextmanager
def engine_for(args: argparse.Namespace) -> Iterator[Engine]:
    if args.url:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        yield Engine(args.url.rstrip("/").removesuffix("/v1"), headers, f"an engine at {args.url}")
    elif args.device == "cuda":
        with gpu_engine(args) as engine:
            yield engine
    else:
        with cpu_engine(args) as engine:
            yield engine


def job_form(args: argparse.Namespace, index: int, previews: bool) -> dict[str, str]:
    width, height = size_for(args.tier, "16:9")
    form = {
        "prompt": "a red circle moving left on a white background",
        "size": f"{width}x{height}",
        "num_frames": str(args.frames),
        "num_inference_steps": str(args.steps),
        "guidance_scale": str(args.guidance),
        "seed": str(index),
    }
    if not previews:
        form["extra_params"] = json.dumps({"previews": False})
    return form


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: ") and kind is not None:
            yield kind, json.loads(line.removeprefix("data: "))
            kind = None


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    """The engine's and the requests' flags, which preview_overhead.py and cancel_latency.py share."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tier", default="256p", choices=("256p", "480p", "720p"))
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=None, help="default: 35 on a CPU, 20 on a GPU")
    parser.add_argument("--guidance", type=float, default=None, help="default: 6 on a CPU, 5 on a GPU")
    parser.add_argument("--rounds", type=int, default=12, help="rounds (a job with previews and one without; a cancel)")
    parser.add_argument("--interval", type=float, default=0.5, help="the server's preview interval (s)")
    parser.add_argument("--model", default=str(ROOT / "assets" / "omni-small-t2v"), help="the CPU engine's model")
    parser.add_argument("--threads", type=int, default=None, help="the CPU engine's torch threads")
    parser.add_argument("--smoke", action="store_true", help="GPU: the builder's tiny model (checks the script)")
    parser.add_argument("--url", default=None, help="an engine that already runs (its own preview settings hold)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    gpu = args.device == "cuda"
    args.steps = args.steps or (20 if gpu else 35)
    args.guidance = args.guidance if args.guidance is not None else (5.0 if gpu else 6.0)
    return args
