"""Jobs of the embedded engine: their records, a FIFO queue, one worker thread that batches, cancel.

The worker runs the pipeline off the event loop. It takes the oldest queued job and, where the pipeline can
batch, up to `max_batch - 1` queued jobs of the same shape (size, frames, steps, guidance, flow shift) to run
with it in one denoising loop; the oldest job waits at most `batch_wait_ms` (from when it was queued) for such
partners (a tenth of that when no other job is running or finishing: then only a burst of requests sent
together is worth waiting for). Each job of a batch keeps its own seed, prompt, progress, cancel and result. A job is `queued`
until the worker really starts it, and its `progress` follows the denoising steps (decode and encode take
the last few percent). With `encode_workers`, mp4 encoding runs beside the next batch instead of before it.
With a `warmup` still under way, the worker runs its next run whenever no job is queued, and a batch is no
larger than the largest batch size of its shape warmed so far. A job keeps its latest preview
(studio.engine.previews: at most one per `previews.interval_s`, and one at the last step, unless the server or its
request turned them off), and its followers are woken when it changes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.engine.encoding import StreamedEncode, encode_pieces
from studio.engine.events import JobWatch
from studio.engine.generation_types import BatchItem, GenerationCancelled, GenerationOutput, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.metrics import EngineMetrics, stage_metrics
from studio.engine.previews import PreviewImage, PreviewSettings, PreviewTarget
from studio.engine.send_order import SendOrder, SendPlace
from studio.engine.warmup import Warmup
from studio.media import VideoInfo, encode_mp4
from studio.protocol import DEFAULT_QUALITY, JobRecord, JobStatus, ProgressEvent

log = logging.getLogger(__name__)

# Share of `progress` given to the denoising loop; the rest is VAE decode and mp4 encode.
DENOISE_SHARE = 95.0
# The error of a job stopped by DELETE: 499, nginx's "client closed request".
CANCELLED = (499, "cancelled")


def _whole_seconds(frames: int, fps: float) -> str:
    """A clip's length as the record's `seconds` (whole seconds, as a string): rounded up, at least 1."""
    return str(max(1, math.ceil(frames / fps)))


@dataclass
class Job:
    id: str
    params: GenerationParams
    fps: int
    model: str
    created_at: int  # whole seconds of the wall clock, as the wire has it; the job's figures use `arrived`
    status: JobStatus = JobStatus.QUEUED
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
    requested_frames: int | None = None  # as the request named them (num_frames, or seconds x fps); None if neither
    output_frames: int | None = None  # as counted in the video, set as the job completes
    quality: str = DEFAULT_QUALITY  # the request's `quality`, as sent
    metrics_wanted: bool = False  # the request's `return_stage_metrics`
    metrics: dict[str, Any] | None = None
    # time.monotonic() when the request arrived: the job's latency is measured from it, never from created_at,
    # whose whole seconds would add up to a second.
    arrived: float = field(default_factory=time.monotonic)
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    listed: bool = True
    encode_detail: dict[str, float] | None = None  # where an encode beside the decode spent its time after it
    queued_at: float = 0.0  # time.monotonic() when submitted
    batch_size: int | None = None  # how many jobs shared its denoising loop
    # Its denoising steps as the device finished them (time.perf_counter()), for its events.
    step: int = 0
    total_steps: int | None = None
    denoise_began: float | None = None
    last_step_at: float | None = None
    last_step_s: float | None = None
    place: SendPlace | None = None  # where its client's X-Omni-Studio-Order put it among the jobs it sent
    previews_wanted: bool = True  # its request's extra_params.previews
    preview: PreviewImage | None = None  # its latest preview
    server_levers: dict[str, str] = field(default_factory=dict)  # the server-wide levers it was made with (fp8)

    def stepped(self, done: int, total: int) -> None:
        """A denoising step finished (called on the worker thread, as the loop reports it)."""
        now = time.perf_counter()
        if self.denoise_began is None:
            self.denoise_began = now
        before = self.last_step_at if self.last_step_at is not None else self.denoise_began
        self.step, self.total_steps = done, total
        self.last_step_s = now - before if done > 0 else None
        self.last_step_at = now
        self.progress = int(DENOISE_SHARE * done / total)

    def progress_event(self) -> ProgressEvent | None:
        """Its latest step, as its events say it; None before its first."""
        if self.total_steps is None or self.denoise_began is None:
            return None
        elapsed = (self.last_step_at or self.denoise_began) - self.denoise_began
        return ProgressEvent(
            step=self.step,
            total_steps=self.total_steps,
            progress=self.progress,
            elapsed_s=round(elapsed, 4),
            step_s=None if self.last_step_s is None else round(self.last_step_s, 4),
        )

    def fail(self, code: int, message: str) -> None:
        self.status, self.error = JobStatus.FAILED, {"code": code, "message": message}

    def record(self) -> JobRecord:
        """The job record, with vLLM-Omni 0.30's fields and rules: size, seconds and quality as sent; num_frames and
        duration_s as the request named them (null where it named no length), then, once completed, as counted in
        the video. Where seconds was not sent, vLLM-Omni answers "4" whatever the length; the engine answers null
        until the video is made, then its length in whole seconds, rounded up (docs/compatibility.md). A value is
        never changed while the job runs: what was not sent stays null until the video says it."""
        completed = self.status is JobStatus.COMPLETED
        # output_frames is read only once completed, so a record made while the job finishes shows no half-change.
        made = self.output_frames if completed else None
        frames = made if made is not None else self.requested_frames
        seconds = self.seconds_field
        if seconds is None and made is not None:
            seconds = _whole_seconds(made, self.fps)
        if made is None and self.seconds_field is not None:
            duration_s: float | None = float(self.seconds_field)  # as vLLM-Omni's record says it before the video
        else:
            duration_s = round(frames / self.fps, 6) if frames else None
        return JobRecord(
            model=self.model,
            prompt=self.params.prompt,
            id=self.id,
            status=self.status,
            size=self.size_field,
            progress=self.progress,
            seconds=seconds,
            quality=self.quality,
            completed_at=self.completed_at,
            created_at=self.created_at,
            error=self.error,
            media_type="video/mp4",
            file_name=f"{self.id}.mp4" if completed else None,
            inference_time_s=self.inference_time_s,
            fps=float(self.fps),
            num_frames=frames,
            duration_s=duration_s,
            metrics=self.metrics if completed else None,
            stage_durations=self.stage_durations or {},
            peak_memory_mb=self.peak_memory_mb or 0.0,
            native_size=f"{self.native_size[0]}x{self.native_size[1]}" if self.native_size is not None else None,
            levers=self.levers() or None,
        )

    def levers(self) -> dict[str, str]:
        """The speed levers that changed how this job was made: the server's (fp8) and its own step cache."""
        levers = dict(self.server_levers)
        if self.params.step_cache.active:
            levers["step_cache"] = self.params.step_cache.label()
        return levers


# What the worker is handed, instead of jobs, when it should make the warm-up's next run.
WARM_UP: Any = object()
IDLE: Any = object()


@dataclass(frozen=True)
class IdleHook:
    """What the worker does once after `after_s` seconds with nothing queued (the engine hands its freed heap
    back then); waiting first keeps it off the path of a client that sends its requests one after another."""

    after_s: float
    action: Callable[[], object]


def new_job_id(prefix: str = "video_gen") -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class JobManager:
    """Keeps job records and runs queued jobs in FIFO order on a worker thread, in batches where it can."""

    def __init__(
        self,
        generator: VideoGenerator,
        output_dir: Path,
        model_name: str,
        metrics: EngineMetrics,
        max_kept_jobs: int = 1000,
        max_batch: int = 1,
        batch_wait_ms: float = 0.0,
        encode_workers: int = 0,
        warmup: Warmup | None = None,
        previews: PreviewSettings | None = None,
        when_idle: IdleHook | None = None,
    ):
        self.generator = generator
        self.when_idle = when_idle
        self._idle_at: float | None = None  # when the hook is due: set as work ends, cleared once it has run
        self.previews = previews if previews is not None else PreviewSettings()
        self.warmup = warmup  # its runs left are made while no job is queued
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.model_name = model_name
        self.metrics = metrics
        self.max_kept_jobs = max_kept_jobs
        self.max_batch = max(1, max_batch)
        generator.set_max_batch(self.max_batch)
        self.batch_wait_s = max(0.0, batch_wait_ms) / 1000.0
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._pending: deque[Job] = deque()
        self._lock = threading.Lock()
        self._queue_changed = threading.Condition()
        self._stopping = False
        self._running: set[str] = set()
        self._worker = threading.Thread(target=self._work, name="engine-worker", daemon=True)
        self._encoder = (
            ThreadPoolExecutor(max_workers=encode_workers, thread_name_prefix="engine-encode")
            if encode_workers > 0
            else None
        )
        self._listeners: list[Callable[[Job], None]] = []
        self._send_order = SendOrder()  # under _queue_changed
        self.watch = JobWatch()  # the streams of jobs' events: woken when a job moves
        self.batches_run = 0  # batches started

    def start(self) -> None:
        self._warm_encoder()
        self._worker.start()

    def _warm_encoder(self) -> None:
        """Encode a tiny clip once, so the first request does not pay the encoder's start-up."""
        path = self.output_dir / f".warm-up-{uuid.uuid4().hex}.mp4"
        try:
            encode_mp4(np.zeros((2, 16, 16, 3), dtype=np.uint8), 8, path, threads=self.generator.threads)
        except Exception:
            log.exception("the mp4 encoder failed its warm-up")
        finally:
            path.unlink(missing_ok=True)

    def shutdown(self) -> None:
        with self._lock:
            pending = [job for job in self._jobs.values() if job.status in (JobStatus.QUEUED, JobStatus.IN_PROGRESS)]
        for job in pending:
            job.cancel_requested.set()
        with self._queue_changed:
            self._stopping = True
            self._queue_changed.notify_all()
        if self._encoder is not None:
            self._encoder.shutdown(wait=False)

    def add_listener(self, listener: Callable[[Job], None]) -> None:
        """Called from the worker (or an encoder) thread whenever a job finishes."""
        self._listeners.append(listener)

    def new_job(self, params: GenerationParams, fps: int, job_id: str | None = None, listed: bool = True) -> Job:
        return Job(
            id=job_id or new_job_id(),
            params=params,
            fps=fps,
            model=self.model_name,
            created_at=int(time.time()),
            listed=listed,
            requested_frames=params.num_frames,  # a request's own count replaces it (serving: None where it sent none)
            server_levers=dict(getattr(self.generator, "levers", None) or {}),
        )

    def submit(self, job: Job) -> Job:
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old_jobs()
        job.queued_at = time.monotonic()
        with self._queue_changed:
            self._queue_in_send_order(job)
            self._queue_changed.notify_all()
        self._update_gauges()
        return job

    def _queue_in_send_order(self, job: Job) -> None:
        """Append the job, or put it before the queued jobs its client sent after it."""
        place = job.place
        if place is not None:
            self._send_order.arrived(place)
            for index, queued in enumerate(self._pending):
                if queued.place is not None and queued.place.stream == place.stream and queued.place.seq > place.seq:
                    self._pending.insert(index, job)
                    return
        self._pending.append(job)

    def fail_now(self, job: Job, code: int, message: str) -> Job:
        """A job that fails before it is queued (a guardrail block), kept so GET returns it as vLLM-Omni does."""
        job.fail(code, message)
        job.completed_at = job.created_at
        job.done.set()
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old_jobs()
        if job.place is not None:  # the jobs its client sent after it need not wait for it
            with self._queue_changed:
                self._send_order.arrived(job.place)
                self._queue_changed.notify_all()
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
        """Stop a job (at its next step when running; the others of its batch go on) and forget it.
        False if it did not stop within wait_s."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        job.cancel_requested.set()
        if job.status is JobStatus.QUEUED:
            with self._lock:
                if job.status is JobStatus.QUEUED:
                    job.fail(*CANCELLED)
                    job.done.set()
            self.watch.moved(job.id)
            with self._queue_changed:
                self._queue_changed.notify_all()
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
            running = len(self._running)
            waiting = sum(1 for job in self._jobs.values() if job.status is JobStatus.QUEUED)
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

    # --- the worker --------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            if batch is IDLE:
                assert self.when_idle is not None
                try:
                    self.when_idle.action()
                except Exception:
                    log.exception("the engine's idle hook failed")
                continue
            if batch is WARM_UP:
                assert self.warmup is not None
                self.warmup.run_next()
                self._work_ended()
                continue
            with self._lock:
                batch = [job for job in batch if job.status is JobStatus.QUEUED and not job.cancel_requested.is_set()]
                started = time.time()
                for job in batch:
                    job.status, job.started_at, job.batch_size = JobStatus.IN_PROGRESS, started, len(batch)
                    self._running.add(job.id)
            for job in batch:
                self.watch.moved(job.id)
            if not batch:
                continue
            self._update_gauges()
            self._run_batch(batch)
            self._work_ended()

    def _work_ended(self) -> None:
        if self.when_idle is not None:
            with self._queue_changed:
                self._idle_at = time.monotonic() + self.when_idle.after_s

    def _next_batch(self) -> Any:
        """The oldest live job and its partners; waits for a first job, and for partners up to the deadline.
        WARM_UP where nothing is queued and the warm-up has runs left; IDLE once nothing has been queued for the
        idle hook's wait since the last work; None once stopping."""
        with self._queue_changed:
            while True:
                while self._pending and (self._pending[0].cancel_requested.is_set() or self._pending[0].done.is_set()):
                    self._pending.popleft()
                if self._stopping:
                    return None
                if not self._pending:
                    if self.warmup is not None and self.warmup.pending:
                        return WARM_UP
                    if self._idle_at is not None:
                        remaining = self._idle_at - time.monotonic()
                        if remaining <= 0:
                            self._idle_at = None
                            return IDLE
                        self._queue_changed.wait(remaining)
                        continue
                    self._queue_changed.wait()
                    continue
                head, hold_until = self._first_in_send_order()
                if head is None:
                    self._queue_changed.wait(max(0.0, hold_until - time.monotonic()) if hold_until < 1e18 else None)
                    continue
                key = self.generator.batch_key(head.params) if self.max_batch > 1 else None
                limit = (
                    self.max_batch if self.warmup is None else min(self.max_batch, self.warmup.batch_limit(head.params))
                )
                if key is None:
                    self._pending.remove(head)
                    return [head]
                with self._lock:
                    busy = bool(self._running)  # jobs still finishing: their clients may send the next ones
                deadline = head.queued_at + (self.batch_wait_s if busy else self.batch_wait_s / 10)
                while True:
                    partners = [
                        job
                        for job in self._pending
                        if job is not head
                        and not job.cancel_requested.is_set()
                        and (job.place is None or not self._send_order.missing_before(job.place))
                        and self.generator.batch_key(job.params) == key
                    ][: limit - 1]
                    remaining = deadline - time.monotonic()
                    if len(partners) + 1 >= limit or remaining <= 0 or self._stopping:
                        break
                    if head.cancel_requested.is_set():
                        break
                    self._queue_changed.wait(remaining)
                if head.cancel_requested.is_set():
                    continue  # the head left; start over with the next oldest
                batch = [head, *partners]
                taken = {id(job) for job in batch}
                self._pending = deque(job for job in self._pending if id(job) not in taken)
                return batch

    def _first_in_send_order(self) -> tuple[Job | None, float]:
        """The oldest queued job that need not wait for one its client sent before it; else None, and until when
        the first of them waits."""
        soonest = float("inf")
        for job in self._pending:
            if job.cancel_requested.is_set() or job.done.is_set():
                continue
            until = None if job.place is None else self._send_order.hold_until(job.place, job.queued_at)
            if until is None:
                return job, 0.0
            soonest = min(soonest, until)
        return None, soonest

    def _run_batch(self, jobs: list[Job]) -> None:
        self.batches_run += 1
        started = time.perf_counter()
        answered: set[int] = set()

        # With an encoder pool, each video is encoded there as the VAE hands its frames over.
        streams = (
            [
                StreamedEncode(self._encoder, self.output_dir / f"{job.id}.mp4", job.fps, self.generator.threads)
                for job in jobs
            ]
            if self._encoder is not None
            else None
        )

        def on_result(index: int, result: GenerationOutput | BaseException) -> None:
            answered.add(index)
            job = jobs[index]
            if isinstance(result, BaseException):
                if streams is not None:
                    streams[index].abort()
                self._fail(job, result)
                self._finished(job)
            elif streams is not None:
                decoded = time.perf_counter()
                stream = streams[index]
                # Pieces handed over already (the engine's own loop) need nothing more; else the encoder takes
                # the video a few frames at a time, resized as it goes, never the whole clip at the requested size.
                stream.finish(result.frames if stream.pieces_pushed else result.chunks()).add_done_callback(
                    lambda encoded: self._complete_streamed(job, result, started, decoded, encoded, stream)
                )
            else:
                self._complete(job, result, started)

        items = [
            BatchItem(
                job.params,
                on_step=self._progress_callback(job),
                should_stop=job.cancel_requested.is_set,
                on_frames=streams[index].push if streams is not None else None,
                preview=self._preview_target(job),
            )
            for index, job in enumerate(jobs)
        ]
        try:
            self.generator.generate_batch(items, on_result)
        except Exception as exc:
            log.exception("batch of %d failed", len(jobs))
            for index, job in enumerate(jobs):
                if index not in answered:
                    if streams is not None:
                        streams[index].abort()
                    self._fail(job, exc)
                    self._finished(job)

    def _preview_target(self, job: Job) -> PreviewTarget | None:
        if not (self.previews.enabled and job.previews_wanted):
            return None

        def deliver(image: PreviewImage) -> None:
            # From the encoder (on a GPU its own thread); a late one never replaces a later step's.
            if job.preview is None or image.step > job.preview.step:
                job.preview = image
                self.watch.moved(job.id)

        return PreviewTarget(job.params.width, job.params.height, self.previews.interval_s, deliver)

    def _progress_callback(self, job: Job) -> Callable[[int, int], None]:
        def on_step(done: int, total: int) -> None:
            job.stepped(done, total)
            self.watch.moved(job.id)

        return on_step

    def _fail(self, job: Job, exc: BaseException) -> None:
        if isinstance(exc, GenerationCancelled):
            job.fail(*CANCELLED)
        else:
            log.error("job %s failed: %s: %s", job.id, type(exc).__name__, exc)
            job.fail(500, f"{type(exc).__name__}: {exc}")
        job.completed_at = int(time.time())

    def _complete(self, job: Job, output: GenerationOutput, started: float) -> None:
        """Encode the mp4 and finish the record."""
        try:
            encode_started = time.perf_counter()
            path = self.output_dir / f"{job.id}.mp4"
            if output.resized:  # made at the model's own size: resized a few frames at a time as they are encoded
                info = encode_pieces(output.chunks(), job.fps, path, threads=self.generator.threads)
            else:
                info = encode_mp4(output.frames, job.fps, path, threads=self.generator.threads)
        except Exception as exc:
            log.exception("job %s failed", job.id)
            self._fail(job, exc)
            self._finished(job)
            return
        self._record_video(job, output, started, path, info, time.perf_counter() - encode_started)

    def _complete_streamed(
        self,
        job: Job,
        output: GenerationOutput,
        started: float,
        decoded: float,
        encoded: Future,
        stream: StreamedEncode,
    ) -> None:
        """Finish the record once the encode that ran beside the decode has finished; its `encode` time is what
        it took after the decode."""
        try:
            info = encoded.result()
            if info is None:
                raise RuntimeError("the encode was aborted")
            job.encode_detail = {"backlog_pieces": stream.backlog_at_finish, **stream.close_seconds}
        except Exception as exc:
            log.error("job %s failed in its encode: %s: %s", job.id, type(exc).__name__, exc)
            self._fail(job, exc)
            self._finished(job)
            return
        self._record_video(job, output, started, self.output_dir / f"{job.id}.mp4", info, time.perf_counter() - decoded)

    def _record_video(
        self, job: Job, output: GenerationOutput, started: float, path: Path, info: VideoInfo, encode_s: float
    ) -> None:
        job.output_frames = info.num_frames
        job.file_path = path
        job.inference_time_s = round(output.inference_time_s + encode_s, 4)
        job.stage_durations = {
            **{k: round(v, 4) for k, v in output.stage_durations.items()},
            "encode": round(encode_s, 4),
        }
        job.peak_memory_mb = output.peak_memory_mb
        if output.native_size != (job.params.width, job.params.height):
            job.native_size = output.native_size
        e2e_s = time.monotonic() - job.arrived
        if job.metrics_wanted:
            job.metrics = stage_metrics(
                job.stage_durations, job.inference_time_s, job.params.num_inference_steps, info.num_frames, e2e_s
            )
        job.progress, job.status, job.completed_at = 100, JobStatus.COMPLETED, int(time.time())
        total_s = time.perf_counter() - started
        self.metrics.observe_success(
            e2e_s=e2e_s,
            exec_s=total_s,
            per_step_s=output.stage_durations["denoise"] / max(1, job.params.num_inference_steps),
            postprocess_s=output.stage_durations["decode"] + encode_s,
        )
        self._finished(job)

    def _finished(self, job: Job) -> None:
        with self._lock:
            self._running.discard(job.id)
        job.done.set()
        self.watch.moved(job.id)
        self._update_gauges()
        for listener in self._listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job listener failed")
