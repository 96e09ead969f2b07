"""The engine's batching scheduler on the CPU: real VideoGenerator and JobManager over the tiny model.

Batched jobs make the same video as the same requests run alone (and as the plain pipeline call); a job
cancelled inside a batch stops at once while the others finish unharmed; only jobs of one shape share a
batch, the oldest job goes first, and a job waits at most `batch_wait_ms` for partners.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import av
import numpy as np
import pytest
import torch

from studio.config import TINY_WAN_DIR
from studio.engine import jobs as jobs_module
from studio.engine.encoding import StreamedEncode
from studio.engine.generation_types import BatchItem, GenerationCancelled, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.jobs import Job, JobManager
from studio.engine.metrics import EngineMetrics
from studio.engine.plain_call import generate_plain
from studio.engine.vae_chunks import vae_decode_chunks
from studio.media import Mp4Writer, encode_mp4
from tests.waiting import wait_for

SIZE = {"width": 32, "height": 32, "num_frames": 5}


def params(seed: int, steps: int = 3, prompt: str | None = None, **changes: object) -> GenerationParams:
    values = {
        **SIZE,
        "prompt": prompt or f"a red circle moving left {seed}",
        "num_inference_steps": steps,
        "guidance_scale": 5.0,
        "seed": seed,
        **changes,
    }
    return GenerationParams(**values)


@pytest.fixture(scope="module")
def generator() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    assert generator.batched_loop  # the tiny model is a Wan pipeline: the engine's own loop drives it
    return generator


@pytest.fixture
def slow_steps(generator: VideoGenerator) -> Iterator[None]:
    """Each transformer call takes at least 40 ms, so a test can act while a batch is denoising."""
    handle = generator.pipe.transformer.register_forward_pre_hook(lambda *_: time.sleep(0.04))
    yield
    handle.remove()


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """The frames each job handed to the mp4 encoder, by file name (the encoder itself still runs)."""
    frames: dict[str, np.ndarray] = {}
    real = jobs_module.encode_mp4

    def recording(video: np.ndarray, fps: int, path: Path, **options: object):
        frames[Path(path).stem] = video.astype(int)
        return real(video, fps, path, **options)

    monkeypatch.setattr(jobs_module, "encode_mp4", recording)
    return frames


def manager_for(generator: VideoGenerator, tmp_path: Path, **options: object) -> JobManager:
    manager = JobManager(generator, tmp_path / "out", "tiny-wan", EngineMetrics("tiny-wan"), **options)
    manager.start()
    return manager


def decoded(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]).astype(int)


def test_batched_loop_matches_the_plain_pipeline_call(generator: VideoGenerator) -> None:
    requests = [params(11), params(12, negative_prompt="blurry"), params(13)]
    plain = [
        generate_plain(generator.pipe, generator.facts, generator.device, p, None, None).frames.astype(int)
        for p in requests
    ]
    alone = [generator.generate(p).frames.astype(int) for p in requests]
    together: dict[int, np.ndarray] = {}
    generator.generate_batch([BatchItem(p) for p in requests], lambda i, out: together.__setitem__(i, out.frames))
    for i in range(len(requests)):
        assert np.abs(alone[i] - plain[i]).max() <= 1
        assert np.abs(together[i].astype(int) - alone[i]).max() <= 1
        assert np.abs(together[i].astype(int) - alone[i]).mean() < 0.01
    assert np.abs(together[0].astype(int) - together[1].astype(int)).mean() > 1  # different seeds, prompts


def test_batched_jobs_make_the_same_videos_as_unbatched_ones(
    generator: VideoGenerator, tmp_path: Path, encoded: dict[str, np.ndarray]
) -> None:
    requests = [params(21), params(22), params(23)]
    one_by_one = manager_for(generator, tmp_path / "single", max_batch=1)
    singles = [one_by_one.submit(one_by_one.new_job(p, fps=8)) for p in requests]
    for job in singles:
        assert job.done.wait(60) and job.status == "completed"
        assert job.batch_size == 1
    one_by_one.shutdown()

    batching = manager_for(generator, tmp_path / "batched", max_batch=4, batch_wait_ms=2000)
    batched = [batching.submit(batching.new_job(p, fps=8)) for p in requests]
    for job in batched:
        assert job.done.wait(60) and job.status == "completed", job.error
        assert job.batch_size == 3 and job.progress == 100
        assert job.record().num_frames == 5
        assert decoded(job.file_path).shape == (5, 32, 32, 3)
    assert batching.batches_run == 1
    batching.shutdown()
    for single, batch in zip(singles, batched, strict=True):
        a, b = encoded[single.id], encoded[batch.id]
        assert np.abs(a - b).max() <= 1 and np.abs(a - b).mean() < 0.01
    assert np.abs(encoded[singles[0].id] - encoded[batched[1].id]).max() > 10  # another seed and prompt


def test_cancel_one_batched_job_leaves_the_others_intact(
    generator: VideoGenerator, tmp_path: Path, slow_steps: None, encoded: dict[str, np.ndarray]
) -> None:
    requests = [params(31, steps=8), params(32, steps=8), params(33, steps=8)]
    references = [generator.generate(p).frames for p in requests]
    manager = manager_for(generator, tmp_path, max_batch=3, batch_wait_ms=2000)
    jobs = [manager.submit(manager.new_job(p, fps=8)) for p in requests]
    wait_for(
        lambda: all(job.status == "in_progress" and job.progress > 0 for job in jobs),
        "every job of the batch to be denoising",
        30,
        poll_s=0.01,
        detail=lambda: f"{[(job.status, job.progress) for job in jobs]}",
    )
    assert all(job.batch_size == 3 for job in jobs)
    cancelled_at = time.monotonic()
    assert manager.cancel(jobs[1].id, wait_s=5.0)  # stops at its next step, long before the batch ends
    assert time.monotonic() - cancelled_at < 1.0
    assert jobs[1].status == "failed" and jobs[1].error == {"code": 499, "message": "cancelled"}
    assert manager.get(jobs[1].id) is None
    assert jobs[0].status == jobs[2].status == "in_progress"  # the others go on
    for index in (0, 2):
        job = jobs[index]
        assert job.done.wait(60) and job.status == "completed", job.error
        assert decoded(job.file_path).shape == (5, 32, 32, 3)
        assert np.abs(encoded[job.id] - references[index].astype(int)).max() <= 1
    assert jobs[1].id not in encoded
    manager.shutdown()
    assert manager.queue_depth() == (0, 0)


def test_cancel_every_job_of_a_batch_stops_the_loop(generator: VideoGenerator, slow_steps: None) -> None:
    stop = threading.Event()
    answers: dict[int, object] = {}
    items = [BatchItem(params(41 + i, steps=50), should_stop=stop.is_set) for i in range(2)]
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    generator.generate_batch(items, lambda i, result: answers.__setitem__(i, result))
    assert time.monotonic() - started < 2.0  # 50 steps of at least 40 ms would take 2 s or more
    assert all(isinstance(answers[i], GenerationCancelled) for i in range(2))


def test_only_jobs_of_one_shape_share_a_batch_and_the_oldest_goes_first(
    generator: VideoGenerator, tmp_path: Path, slow_steps: None
) -> None:
    manager = manager_for(generator, tmp_path, max_batch=4, batch_wait_ms=0)
    blocker = manager.submit(manager.new_job(params(50, steps=6), fps=8))  # runs alone; the rest queue behind it
    wait_for(lambda: blocker.status == "in_progress", "the blocking job to run", 30, poll_s=0.01)
    a = manager.submit(manager.new_job(params(51), fps=8))
    b = manager.submit(manager.new_job(params(52, width=48), fps=8))  # another size
    c = manager.submit(manager.new_job(params(53), fps=8))
    d = manager.submit(manager.new_job(params(54, guidance_scale=3.0), fps=8))  # another guidance
    e = manager.submit(manager.new_job(params(55), fps=8))
    assert manager.queue_depth() == (1, 5)
    jobs = [blocker, a, b, c, d, e]
    for job in jobs:
        assert job.done.wait(60) and job.status == "completed", job.error
    assert [job.batch_size for job in jobs] == [1, 3, 1, 3, 1, 3]
    assert a.started_at == c.started_at == e.started_at
    assert a.started_at < b.started_at < d.started_at  # the oldest queued job leads each batch
    assert manager.batches_run == 4
    manager.shutdown()


def test_a_job_waits_at_most_batch_wait_for_partners(
    generator: VideoGenerator, tmp_path: Path, slow_steps: None
) -> None:
    manager = manager_for(generator, tmp_path, max_batch=8, batch_wait_ms=3000)

    def waited(job: Job) -> float:
        wait_for(lambda: job.started_at is not None, f"job {job.id} to start", 30, poll_s=0.01)
        return job.started_at - (time.time() - (time.monotonic() - job.queued_at))

    # Nothing else running: a lone job waits a tenth of batch_wait for a burst, then runs alone.
    lone = manager.submit(manager.new_job(params(61, steps=1), fps=8))
    assert 0.25 <= waited(lone) < 1.0
    assert lone.done.wait(60) and lone.status == "completed" and lone.batch_size == 1

    # A partner that arrives within the wait joins the batch.
    first = manager.submit(manager.new_job(params(62, steps=1), fps=8))
    time.sleep(0.1)  # the partner comes 0.1 s into the first job's wait for one: what is tested
    second = manager.submit(manager.new_job(params(63, steps=1), fps=8))
    for job in (first, second):
        assert job.done.wait(60) and job.status == "completed"
    assert first.batch_size == second.batch_size == 2
    assert waited(first) < 0.45

    manager.shutdown()


def test_while_other_jobs_finish_a_job_waits_the_whole_batch_wait(
    generator: VideoGenerator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = jobs_module.encode_mp4

    def slow_encode(*args: object, **options: object):
        time.sleep(1.0)
        return real(*args, **options)

    monkeypatch.setattr(jobs_module, "encode_mp4", slow_encode)
    manager = manager_for(generator, tmp_path, max_batch=8, batch_wait_ms=600, encode_workers=1)
    finishing = manager.submit(manager.new_job(params(64, steps=1), fps=8))
    wait_for(  # denoised and decoded; its mp4 is being encoded
        lambda: finishing.progress == 95, "the first job to be encoding its mp4", 30, poll_s=0.01
    )
    queued = manager.submit(manager.new_job(params(65, steps=1), fps=8))
    assert queued.done.wait(60) and queued.status == "completed" and queued.batch_size == 1
    waited = queued.started_at - (time.time() - (time.monotonic() - queued.queued_at))
    assert 0.5 <= waited < 1.0  # its client's partner may be about to send the next request
    assert finishing.done.wait(60) and finishing.status == "completed"
    manager.shutdown()


def test_requests_that_cannot_batch_run_alone(generator: VideoGenerator, tmp_path: Path) -> None:
    # A request with pipeline call options of its own goes through the plain pipeline call.
    special = params(71, extra={"max_sequence_length": 64})
    assert generator.batch_key(special) is None
    manager = manager_for(generator, tmp_path, max_batch=4, batch_wait_ms=1000)
    jobs = [manager.submit(manager.new_job(p, fps=8)) for p in (special, params(72))]
    for job in jobs:
        assert job.done.wait(60) and job.status == "completed", job.error
        assert job.batch_size == 1
    manager.shutdown()


def test_the_vae_decoded_in_pieces_gives_its_whole_decode(generator: VideoGenerator) -> None:
    vae = generator.pipe.vae
    z = torch.randn(2, vae.config.z_dim, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        whole = vae.decode(z, return_dict=False)[0]
        pieces = list(vae_decode_chunks(vae, z))
    assert [piece.shape[2] for piece in pieces] == [1, 4, 4]  # the first latent frame makes one frame, the rest 4
    assert torch.equal(torch.cat(pieces, dim=2), whole)


class RecordingStream(StreamedEncode):
    """The engine's streamed encode, counting the pieces each video was handed in."""

    pieces: ClassVar[dict[str, int]] = {}
    videos: ClassVar[dict[str, np.ndarray]] = {}

    def push(self, frames: np.ndarray) -> None:
        RecordingStream.pieces[self.path.stem] = RecordingStream.pieces.get(self.path.stem, 0) + 1
        super().push(frames)

    def finish(self, frames: np.ndarray):
        RecordingStream.videos[self.path.stem] = frames
        return super().finish(frames)


def test_videos_are_encoded_beside_the_decode_into_the_same_files(
    generator: VideoGenerator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "StreamedEncode", RecordingStream)
    RecordingStream.pieces, RecordingStream.videos = {}, {}
    requests = [params(71, num_frames=9), params(72, num_frames=9)]
    manager = manager_for(generator, tmp_path, max_batch=2, batch_wait_ms=2000, encode_workers=2)
    jobs = [manager.submit(manager.new_job(p, fps=8)) for p in requests]
    for job, request in zip(jobs, requests, strict=True):
        assert job.done.wait(60) and job.status == "completed", job.error
        assert job.batch_size == 2 and RecordingStream.pieces[job.id] == 3  # one piece per latent frame
        assert job.stage_durations["encode"] >= 0 and job.record().num_frames == 9
        video = RecordingStream.videos[job.id]  # the job's frames, as the batch made them
        assert np.abs(video.astype(int) - generator.generate(request).frames.astype(int)).max() <= 1
        reference = tmp_path / f"reference-{job.id}.mp4"
        encode_mp4(video, 8, reference, threads=generator.threads)
        # As faithful to the job's frames as the same frames encoded whole (the encoder is not bit-for-bit
        # repeatable); a piece lost, doubled or out of order would be far off.
        whole_error = np.abs(decoded(reference) - video.astype(int)).mean()
        assert np.abs(decoded(job.file_path) - video.astype(int)).mean() < whole_error + 1.0
    manager.shutdown()


def test_a_failed_streamed_encode_fails_only_its_job_and_leaves_no_file(
    generator: VideoGenerator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = Mp4Writer.write
    doomed: list[str] = []

    def write(self: Mp4Writer, frames: np.ndarray) -> None:
        if self.path.stem in doomed:
            raise OSError(28, "No space left on device")
        real_write(self, frames)

    monkeypatch.setattr(Mp4Writer, "write", write)
    manager = manager_for(generator, tmp_path, max_batch=2, batch_wait_ms=2000, encode_workers=2)
    first = manager.new_job(params(81, num_frames=9), fps=8)
    second = manager.new_job(params(82, num_frames=9), fps=8)
    doomed.append(second.id)
    manager.submit(first)
    manager.submit(second)
    assert first.done.wait(60) and first.status == "completed", first.error
    assert second.done.wait(60) and second.status == "failed"
    assert "No space left on device" in second.error["message"]
    assert not (tmp_path / "out" / f"{second.id}.mp4").exists()
    manager.shutdown()
