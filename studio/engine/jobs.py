"""Jobs of the embedded engine: their records, a FIFO queue, one worker thread, cancel.

The worker runs the pipeline off the event loop. A job is `queued` until the worker really starts it,
and its `progress` follows the denoising steps (decode and encode take the last few percent).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.engine.metrics import EngineMetrics
from studio.engine.pipeline import GenerationCancelled, GenerationParams, PipelineRunner
from studio.media import encode_mp4

log = logging.getLogger(__name__)

# Share of `progress` given to the denoising loop; the rest is VAE decode and mp4 encode.
DENOISE_SHARE = 95.0


@dataclass
class Job:
    id: str
    params: GenerationParams
    fps: int
    model: str
    created_at: int
    status: str = "queued"
    progress: int = 0
    started_at: float | None = None
    completed_at: int | None = None
    error: dict[str, Any] | None = None
    inference_time_s: float | None = None
    stage_durations: dict[str, float] | None = None
    peak_memory_mb: float | None = None
    native_size: tuple[int, int] | None = None
    file_path: Path | None = None
    size_field: str | None = None  # the `size` form field as sent; vLLM-Omni's record shows only that
    seconds_field: str | None = None
    requested_frames: int | None = None
    output_frames: int | None = None
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    listed: bool = True

    @property
    def size(self) -> str:
        return f"{self.params.width}x{self.params.height}"

    def record(self) -> dict[str, Any]:
        """The job record, with vLLM-Omni 0.30's fields and rules (size and seconds as sent; seconds "4"
        when not sent; num_frames as requested, then as counted in the output)."""
        frames = self.output_frames if self.output_frames is not None else self.requested_frames
        record: dict[str, Any] = {
            "model": self.model,
            "prompt": self.params.prompt,
            "id": self.id,
            "object": "video",
            "status": self.status,
            "size": self.size_field,
            "progress": self.progress,
            "seconds": self.seconds_field or "4",
            "quality": "default",
            "completed_at": self.completed_at,
            "created_at": self.created_at,
            "remixed_from_video_id": None,
            "error": self.error,
            "media_type": "video/mp4",
            "expires_at": None,
            "file_name": f"{self.id}.mp4" if self.status == "completed" else None,
            "inference_time_s": self.inference_time_s,
            "fps": float(self.fps),
            "num_frames": frames,
            "duration_s": round(frames / self.fps, 6) if frames else None,
            "metrics": None,
            "stage_durations": self.stage_durations or {},
            "peak_memory_mb": self.peak_memory_mb or 0.0,
            "action": None,
        }
        if self.native_size is not None:
            # Not in vLLM-Omni's record: says the model made another size and the frames were resized.
            record["native_size"] = f"{self.native_size[0]}x{self.native_size[1]}"
        return record


def new_job_id(prefix: str = "video_gen") -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class JobManager:
    """Keeps job records, runs queued jobs one at a time in FIFO order on a worker thread."""

    def __init__(
        self,
        runner: PipelineRunner,
        output_dir: Path,
        model_name: str,
        metrics: EngineMetrics,
        max_kept_jobs: int = 1000,
    ):
        self.runner = runner
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.model_name = model_name
        self.metrics = metrics
        self.max_kept_jobs = max_kept_jobs
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._running: Job | None = None
        self._worker = threading.Thread(target=self._work, name="engine-worker", daemon=True)
        self._listeners: list[Callable[[Job], None]] = []

    def start(self) -> None:
        self._worker.start()

    def shutdown(self) -> None:
        with self._lock:
            pending = [job for job in self._jobs.values() if job.status in ("queued", "in_progress")]
        for job in pending:
            job.cancel_requested.set()
        self._queue.put(None)

    def add_listener(self, listener: Callable[[Job], None]) -> None:
        """Called from the worker thread whenever a job finishes."""
        self._listeners.append(listener)

    def new_job(self, params: GenerationParams, fps: int, job_id: str | None = None, listed: bool = True) -> Job:
        return Job(
            id=job_id or new_job_id(),
            params=params,
            fps=fps,
            model=self.model_name,
            created_at=int(time.time()),
            listed=listed,
            requested_frames=params.num_frames,
        )

    def submit(self, job: Job) -> Job:
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old_jobs()
        self._queue.put(job)
        self._update_gauges()
        return job

    def fail_now(self, job: Job, code: int, message: str) -> Job:
        """A job that fails before it is queued (a guardrail block), kept so GET returns it as vLLM-Omni does."""
        job.status, job.error, job.completed_at = "failed", {"code": code, "message": message}, job.created_at
        job.done.set()
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old_jobs()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def list(self, after: str | None, limit: int | None, order: str) -> tuple[list[Job], bool]:
        with self._lock:
            jobs = [job for job in self._jobs.values() if job.listed]
        jobs.sort(key=lambda job: job.created_at, reverse=(order == "desc"))
        if after is not None:
            ids = [job.id for job in jobs]
            jobs = jobs[ids.index(after) + 1 :] if after in ids else []
        if limit is None:
            return jobs, False
        return jobs[:limit], len(jobs) > limit

    def cancel(self, job_id: str, wait_s: float = 2.0) -> bool:
        """Stop a job (at its next step when running) and forget it. False if it did not stop within wait_s."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        job.cancel_requested.set()
        if job.status == "queued":
            with self._lock:
                if job.status == "queued":
                    job.status, job.error = "failed", {"code": 499, "message": "cancelled"}
                    job.done.set()
        stopped = job.done.wait(wait_s)
        if stopped:
            self.forget(job_id)
        self._update_gauges()
        return stopped

    def forget(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None and job.file_path is not None:
            job.file_path.unlink(missing_ok=True)

    def queue_depth(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._lock:
            running = 1 if self._running is not None else 0
            waiting = sum(1 for job in self._jobs.values() if job.status == "queued")
        return running, waiting

    def _forget_old_jobs(self) -> None:
        # Records live in memory as on vLLM-Omni; finished ones beyond the cap are dropped oldest first.
        finished = [jid for jid, job in self._jobs.items() if job.done.is_set()]
        for jid in finished[: max(0, len(self._jobs) - self.max_kept_jobs)]:
            job = self._jobs.pop(jid)
            if job.file_path is not None:
                job.file_path.unlink(missing_ok=True)

    def _update_gauges(self) -> None:
        running, waiting = self.queue_depth()
        self.metrics.running.set(running)
        self.metrics.waiting.set(waiting)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.cancel_requested.is_set() or job.done.is_set():
                continue
            with self._lock:
                job.status, job.started_at, self._running = "in_progress", time.time(), job
            self._update_gauges()
            try:
                self._run(job)
            finally:
                with self._lock:
                    self._running = None
                job.done.set()
                self._update_gauges()
                for listener in self._listeners:
                    listener(job)

    def _run(self, job: Job) -> None:
        def on_step(done: int, total: int) -> None:
            job.progress = int(DENOISE_SHARE * done / total)

        started = time.perf_counter()
        try:
            output = self.runner.generate(job.params, on_step=on_step, should_stop=job.cancel_requested.is_set)
            encode_started = time.perf_counter()
            path = self.output_dir / f"{job.id}.mp4"
            job.output_frames = encode_mp4(output.frames, job.fps, path, threads=self.runner.threads).num_frames
            encode_s = time.perf_counter() - encode_started
        except GenerationCancelled:
            job.status, job.error = "failed", {"code": 499, "message": "cancelled"}
            job.completed_at = int(time.time())
            return
        except Exception as exc:
            log.exception("job %s failed", job.id)
            job.status, job.error = "failed", {"code": 500, "message": f"{type(exc).__name__}: {exc}"}
            job.completed_at = int(time.time())
            return
        job.file_path = path
        job.inference_time_s = round(output.inference_time_s + encode_s, 4)
        job.stage_durations = {
            **{k: round(v, 4) for k, v in output.stage_durations.items()},
            "encode": round(encode_s, 4),
        }
        job.peak_memory_mb = output.peak_memory_mb
        if output.native_size != (job.params.width, job.params.height):
            job.native_size = output.native_size
        job.progress, job.status, job.completed_at = 100, "completed", int(time.time())
        total_s = time.perf_counter() - started
        self.metrics.observe_success(
            e2e_s=time.time() - job.created_at,
            exec_s=total_s,
            per_step_s=output.stage_durations["denoise"] / max(1, job.params.num_inference_steps),
            postprocess_s=output.stage_durations["decode"] + encode_s,
        )
