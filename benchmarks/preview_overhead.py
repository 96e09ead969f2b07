"""Previews on against off: the embedded engine's latency for jobs with previews and without, side by side in one
engine process. Rounds alternate which goes first: a job with previews (the server's default), then the same job
with extra_params {"previews": false}, or the other way round. Each job is sent as the studio sends it (a POST of
the form) and followed to its end through its events (GET /v1/videos/{id}/events), previews and all.

CPU (default): the small model at the default request, 256p 16:9 (320x192), 33 frames, 35 steps, served by a real
`python -m studio.engine` (the same command the studio starts). GPU (`--device cuda --tier 480p`): the
Wan2.1-1.3B-shaped random pipeline that benchmarks/engine_gpu.py builds, loaded into the engine's VideoGenerator
(blocks compiled, warmed at the tier's size, CUDA graphs captured, its latent RGB map fitted at load), behind the
engine's own app served by uvicorn in this process.

    python benchmarks/preview_overhead.py                                  # CPU, the small model
    python benchmarks/preview_overhead.py --device cuda --tier 480p        # one GPU, Wan2.1-1.3B's shape
    python benchmarks/preview_overhead.py --url http://127.0.0.1:8000      # an engine that already runs

Reported: the median latency (POST to the finished record) and the median engine inference time of each, and their
ratio (on / off); the median of each round's own ratio (its two jobs ran back to back) and the fastest job of each
(on a shared machine, the ones its load left alone); for a local engine process, the CPU time it spent per job;
previews per job and their size. `--out FILE` writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from studio.tiers import size_for  # noqa: E402

TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@dataclass
class JobTiming:
    previews_on: bool
    latency_s: float  # from sending the POST to receiving the finished record in the events
    inference_s: float  # the engine's own inference_time_s (denoise, decode, encode)
    previews: int  # preview events received
    preview_bytes: int  # their images, summed
    engine_cpu_s: float | None = None  # CPU time the engine's process spent meanwhile (a local engine process)


@dataclass
class Engine:
    url: str
    headers: dict[str, str]
    description: str
    pid: int | None = None  # its process, where its CPU time can be read (it is a process of its own)


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU time of a process and all its threads so far (Linux' /proc), or None."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    """The engine's own app over the Wan2.1-1.3B-shaped random pipeline of benchmarks/engine_gpu.py, warmed at
    the tier's size as a server warms it, served by uvicorn on a thread of this process."""
    import uvicorn
    from engine_gpu import build_pipeline

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


def run_job(http: httpx.Client, form: dict[str, str], previews_on: bool, pid: int | None = None) -> JobTiming:
    cpu_before = cpu_seconds(pid)
    sent = time.perf_counter()
    created = http.post("/v1/videos", files={k: (None, v) for k, v in form.items()})
    created.raise_for_status()
    job_id = created.json()["id"]
    count = size = 0
    record: dict[str, Any] = {}
    with http.stream("GET", f"/v1/videos/{job_id}/events") as response:
        for kind, data in sse_events(response):
            if kind == "preview":
                count += 1
                size += len(data["image"]) * 3 // 4  # base64 to bytes
            elif kind == "status":
                record = data
    latency = time.perf_counter() - sent
    cpu_after = cpu_seconds(pid)
    if record.get("status") != "completed":
        raise RuntimeError(f"job {job_id} ended {record.get('status')}: {record.get('error')}")
    cpu = cpu_after - cpu_before if cpu_after is not None and cpu_before is not None else None
    return JobTiming(previews_on, latency, float(record.get("inference_time_s") or 0.0), count, size, cpu)


def summary(timings: list[JobTiming]) -> dict[str, Any]:
    on = [t for t in timings if t.previews_on]
    off = [t for t in timings if not t.previews_on]
    latency_on, latency_off = (statistics.median(t.latency_s for t in group) for group in (on, off))
    inference_on, inference_off = (statistics.median(t.inference_s for t in group) for group in (on, off))
    # Each round's two jobs ran back to back: their ratio is least touched by the machine's load drifting. On a
    # shared machine the fastest jobs are the ones the load left alone, and CPU time is steadier than wall time.
    pairs = [a.latency_s / b.latency_s for a, b in zip(on, off, strict=False)]
    fastest_on, fastest_off = (min(t.latency_s for t in group) for group in (on, off))
    cpu = {}
    if all(t.engine_cpu_s is not None for t in timings):
        cpu_on, cpu_off = (statistics.median(t.engine_cpu_s or 0.0 for t in group) for group in (on, off))
        cpu = {
            "engine_cpu_on_s": round(cpu_on, 4),
            "engine_cpu_off_s": round(cpu_off, 4),
            "engine_cpu_ratio": round(cpu_on / cpu_off, 4) if cpu_off else None,
        }
    return {
        "jobs_each": len(on),
        "latency_ratio_of_pairs_median": round(statistics.median(pairs), 4),
        "latency_fastest_on_s": round(fastest_on, 4),
        "latency_fastest_off_s": round(fastest_off, 4),
        "latency_fastest_ratio": round(fastest_on / fastest_off, 4),
        **cpu,
        "latency_on_s": round(latency_on, 4),
        "latency_off_s": round(latency_off, 4),
        "latency_ratio": round(latency_on / latency_off, 4),
        "inference_on_s": round(inference_on, 4),
        "inference_off_s": round(inference_off, 4),
        "inference_ratio": round(inference_on / inference_off, 4) if inference_off else None,
        "previews_per_job": statistics.median(t.previews for t in on),
        "preview_kb_median": round(statistics.median(t.preview_bytes / max(1, t.previews) for t in on) / 1024, 2),
        "previews_when_off": sum(t.previews for t in off),
    }


def machine() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    except ImportError:
        pass
    cores = len(os.sched_getaffinity(0))
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), name)
    return f"{name}, {cores} cores, Python {platform.python_version()}"


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    """The engine's and the requests' flags (cancel_latency.py takes the same)."""
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    width, height = size_for(args.tier, "16:9")
    timings: list[JobTiming] = []
    with engine_for(args) as engine, httpx.Client(base_url=engine.url, headers=engine.headers, timeout=TIMEOUT) as http:
        for index in range(2):  # warm-up: one of each, not counted
            run_job(http, job_form(args, 900 + index, index == 0), index == 0, engine.pid)
        for round_ in range(args.rounds):
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for previews_on in order:
                timing = run_job(http, job_form(args, round_, previews_on), previews_on, engine.pid)
                timings.append(timing)
                print(
                    f"round {round_ + 1}/{args.rounds} previews {'on ' if previews_on else 'off'}: "
                    f"{timing.latency_s:.3f} s (inference {timing.inference_s:.3f} s, {timing.previews} previews)",
                    flush=True,
                )
        description = engine.description
    report = {
        "engine": description,
        "machine": machine(),
        "request": f"{width}x{height}, {args.frames} frames, {args.steps} steps, guidance {args.guidance}",
        "preview_interval_s": args.interval,
        **summary(timings),
        "jobs": [asdict(t) for t in timings],
    }
    write_report(report, args.out)
    return 0


def write_report(report: dict, out: Path | None) -> None:
    """The figures printed (each job's left out) and, with --out, written whole."""
    print(json.dumps({k: v for k, v in report.items() if k != "jobs"}, indent=1))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
