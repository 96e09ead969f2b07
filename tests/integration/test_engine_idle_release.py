"""The engine hands its freed heap back once idle: the job manager's idle hook runs once after each stretch of
work, only after its wait with nothing queued, never between requests that come one after another; and on a
real engine process, over the small model, the resident memory a large request leaves behind goes back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from studio.backend.servers.supervisor import free_port
from studio.config import TINY_WAN_DIR
from studio.engine.allocator import IDLE_RELEASE_AFTER_S
from studio.engine.generation_types import GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.jobs import IdleHook, JobManager
from studio.engine.metrics import EngineMetrics
from tests.waiting import log_tail, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
SMALL_MODEL = ROOT / "assets" / "omni-small-t2v"


def params(seed: int) -> GenerationParams:
    return GenerationParams(f"a red circle {seed}", 32, 32, 5, 2, 5.0, seed=seed)


@pytest.fixture
def generator() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    return generator


def test_the_idle_hook_runs_once_after_each_stretch_of_work_and_not_between_jobs(
    generator: VideoGenerator, tmp_path: Path
) -> None:
    calls: list[float] = []
    called = threading.Event()

    def hook() -> None:
        calls.append(time.monotonic())
        called.set()

    wait_s = 1.0
    manager = JobManager(generator, tmp_path / "out", "tiny", EngineMetrics("tiny"), when_idle=IdleHook(wait_s, hook))
    manager.start()
    try:
        assert not called.wait(wait_s * 2), "the hook ran before any work"
        # A client that sends its next request as soon as the last one ends: no release in between.
        ends = []
        for seed in range(3):
            job = manager.submit(manager.new_job(params(seed), fps=8))
            assert job.done.wait(60) and job.status.value == "completed", job.error
            ends.append(time.monotonic())
        assert calls == [] or calls[0] >= ends[-1] + wait_s * 0.9
        wait_for(lambda: len(calls) == 1, "the idle hook after the work", 30)
        assert calls[0] - ends[-1] >= wait_s * 0.9
        called.clear()
        assert not called.wait(wait_s * 3), "the hook ran again with no work in between"
        job = manager.submit(manager.new_job(params(9), fps=8))
        assert job.done.wait(60) and job.status.value == "completed"
        wait_for(lambda: len(calls) == 2, "the idle hook after the next stretch of work", 30)
    finally:
        manager.shutdown()


def rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def test_a_real_engine_gives_back_a_large_requests_memory_once_idle(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "engine.log"
    command = [sys.executable, "-m", "studio.engine", "--model", str(SMALL_MODEL), "--device", "cpu"]
    command += ["--threads", "1", "--port", str(port), "--output-dir", str(tmp_path / "out")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with log.open("wb") as handle:
        engine = subprocess.Popen(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_page(f"{url}/health", engine, log, 180)
        process = psutil.Process(engine.pid)
        before = rss_mb(process)
        peak = [before]
        fields = {"prompt": "a red circle", "size": "848x480", "num_frames": "61", "num_inference_steps": "2"}
        with httpx.Client(base_url=url, timeout=30) as http:
            job_id = http.post("/v1/videos", files={k: (None, v) for k, v in fields.items()}).json()["id"]

            def finished() -> bool:
                peak.append(rss_mb(process))
                return http.get(f"/v1/videos/{job_id}").json()["status"] in ("completed", "failed")

            wait_for(finished, "the large request", 300, poll_s=0.05)
            assert http.get(f"/v1/videos/{job_id}").json()["status"] == "completed", log_tail(log)
        kept = rss_mb(process) - before  # what the engine holds on to of the request's memory, just after it
        assert kept > 50, f"the request left only {kept:.0f} MB above idle (peak {max(peak) - before:.0f} MB)"
        # Idle past the release, it gives at least a third of that back.
        wait_for(
            lambda: rss_mb(process) - before < kept * 2 / 3,
            f"the engine giving back memory once idle {IDLE_RELEASE_AFTER_S} s (now {rss_mb(process):.0f} MB, "
            f"idle before {before:.0f} MB, {kept:.0f} MB above it after the request)",
            IDLE_RELEASE_AFTER_S + 20,
        )
    finally:
        engine.terminate()
        try:
            engine.wait(30)
        except subprocess.TimeoutExpired:
            engine.kill()
