"""Requests through the engine's own JobManager in this process: one at a time, or clients in a closed loop."""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from benchmarks.harness.wan_model import TIERS, peak_gib, peak_reset
from studio.engine.generation_types import GenerationParams
from studio.engine.jobs import JobManager
from studio.engine.step_cache import StepCachePolicy


def submit_and_wait(manager: JobManager, params: GenerationParams) -> tuple[float, Any]:
    job = manager.new_job(params, fps=16)
    started = time.perf_counter()
    manager.submit(job)
    job.done.wait()
    return time.perf_counter() - started, job


def engine_params(
    args: argparse.Namespace, tier: str, index: int, step_cache: StepCachePolicy | None = None
) -> GenerationParams:
    width, height = TIERS[tier]
    return GenerationParams(
        prompt=f"a red circle moving left, engine request {index}",
        width=width,
        height=height,
        num_frames=args.frames,
        num_inference_steps=args.steps,
        guidance_scale=args.guidance,
        seed=index,
        step_cache=step_cache or StepCachePolicy(),
    )


def run_engine_closed_loop(
    manager: JobManager,
    args: argparse.Namespace,
    tier: str,
    concurrency: int,
    per_client: int,
    step_cache: StepCachePolicy | None = None,
) -> dict[str, Any]:
    """`concurrency` clients, each sending `per_client` requests one after another."""
    latencies: list[float] = []
    failures: list[Any] = []
    batch_sizes: list[int] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for r in range(per_client):
            latency, job = submit_and_wait(manager, engine_params(args, tier, 2000 + c * 100 + r, step_cache))
            with lock:
                latencies.append(latency)
                batch_sizes.append(job.batch_size or 0)
                if job.status != "completed":
                    failures.append(job.error)

    peak_reset(args.device)
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    done = len(latencies) - len(failures)
    return {
        "requests": len(latencies),
        "failed": len(failures),
        "wall_s": round(wall, 3),
        "throughput_videos_per_s": round(done / wall, 4),
        "s_per_video": round(wall / max(1, done), 4),
        "latency_p50_s": round(statistics.median(latencies), 3),
        "latency_max_s": round(max(latencies), 3),
        "batch_sizes": sorted(batch_sizes),
        "peak_gib": peak_gib(args.device),
    }
