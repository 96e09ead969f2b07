"""The engine's warm-up on the CPU, over the tiny Wan: a server answers once every warm-up size is warm at
batch 1 and warms the larger batch sizes while it serves; until a batch size is warm, no batch of that shape
is made larger than the largest one warmed; a decode shape already warmed is not decoded again; and
`--no-warmup-in-background` warms everything before answering.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from studio.backend.servers.supervisor import free_port
from studio.backend.servers.warmup import wait_until_warm
from studio.config import TINY_WAN_DIR
from studio.engine import vae_decode, warmup
from studio.engine.generation_types import BatchItem, DecodeSkipped, GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.jobs import JobManager
from studio.engine.metrics import EngineMetrics
from studio.engine.warmup import Warmup
from tests.waiting import log_tail, wait_for, wait_for_page

ROOT = Path(__file__).resolve().parents[2]
SIZE = (32, 32, 5)


def params(seed: int, size: tuple[int, int, int] = SIZE) -> GenerationParams:
    width, height, frames = size
    return GenerationParams(f"a red circle {seed}", width, height, frames, 2, 5.0, seed=seed)


@pytest.fixture
def generator() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    return generator


@pytest.fixture
def decodes(generator: VideoGenerator) -> Iterator[list[int]]:
    """One entry per VAE decode call (its batch), counted where the decoder's input convolution runs."""
    calls: list[int] = []
    handle = generator.pipe.vae.post_quant_conv.register_forward_hook(lambda _m, args, _o: calls.append(len(args[0])))
    yield calls
    handle.remove()


def test_batches_grow_only_as_their_batch_size_is_warmed(generator: VideoGenerator, tmp_path: Path) -> None:
    plan = Warmup(generator, [SIZE], max_batch=4)
    plan.before_serving()
    assert plan.pending and plan.status() == {"complete": False, "runs_done": 1, "runs_total": 2, "failed": None}
    assert plan.batch_limit(params(1)) == 1
    assert plan.batch_limit(params(1, size=(48, 32, 5))) == 4  # not a warm-up size: compiles at first use anyway
    manager = JobManager(
        generator, tmp_path / "out", "tiny", EngineMetrics("tiny"), max_batch=4, batch_wait_ms=5000, warmup=plan
    )
    early = [manager.submit(manager.new_job(params(10 + i), fps=8)) for i in range(3)]
    manager.start()  # three jobs already queued: they run one by one, then the warm-up's last run
    try:
        for job in early:
            assert job.done.wait(60) and job.status.value == "completed", job.error
        assert [job.batch_size for job in early] == [1, 1, 1]
        wait_for(lambda: plan.complete, "the warm-up's batch of 4", 60)
        assert plan.batch_limit(params(1)) == 4 and not plan.pending
        later = [manager.submit(manager.new_job(params(20 + i), fps=8)) for i in range(4)]
        for job in later:
            assert job.done.wait(60) and job.status.value == "completed", job.error
        assert [job.batch_size for job in later] == [4, 4, 4, 4]
    finally:
        manager.shutdown()


def test_a_decode_shape_warmed_before_is_not_decoded_again(
    generator: VideoGenerator, decodes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One video per decode call, as a 480p video on a GPU: every larger batch repeats batch 1's decode shape.
    monkeypatch.setattr(warmup, "decode_chunk", lambda *_: 1)
    monkeypatch.setattr(vae_decode, "decode_chunk", lambda *_: 1)
    Warmup(generator, [SIZE], max_batch=4).run_all()
    assert decodes == [1]  # batch 1 decoded its video; batch 4's four decode calls of that shape were skipped


def test_items_that_ask_for_no_decode_are_answered_without_one(generator: VideoGenerator, decodes: list[int]) -> None:
    answers: dict[int, object] = {}
    skipped = [BatchItem(params(1), decode=False), BatchItem(params(2), decode=False)]
    generator.generate_batch(skipped, answers.__setitem__)
    assert decodes == [] and all(isinstance(answer, DecodeSkipped) for answer in answers.values())
    mixed = [BatchItem(params(1)), BatchItem(params(2), decode=False)]
    generator.generate_batch(mixed, answers.__setitem__)  # one decode call holds both: it runs
    assert decodes == [2] and all(answer.frames.shape == (5, 32, 32, 3) for answer in answers.values())
    assert torch.equal(torch.as_tensor(answers[0].frames), torch.as_tensor(generator.generate(params(1)).frames))


def start_server(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    log = tmp_path / "engine.log"
    command = [sys.executable, "-m", "studio.engine", "--model", str(TINY_WAN_DIR), "--device", "cpu", "--threads"]
    command += ["1", "--port", str(port), "--no-guardrails", "--warmup", "32x32x5", "--max-batch", "4", *flags]
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_page(url + "/health", server, log, timeout_s=120)
    except BaseException:
        server.kill()
        server.wait()
        raise
    return server, url, log


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def lines_of(log: Path, *starts: str) -> list[int]:
    """The line number of the first log line holding each text."""
    lines = log.read_text(errors="replace").splitlines()
    return [next((n for n, line in enumerate(lines) if text in line), -1) for text in starts]


def test_a_server_answers_after_batch_1_and_warms_the_rest_while_serving(tmp_path: Path) -> None:
    server, url, log = start_server(tmp_path)
    try:
        assert asyncio.run(wait_until_warm([url], timeout_s=60)) == [], log_tail(log)  # what the bench waits for
        status = httpx.get(url + "/health", timeout=5).json()
        assert status["warmup"] == {"complete": True, "runs_done": 2, "runs_total": 2, "failed": None}
        ready, batch_4 = lines_of(log, "ready to serve", "warm-up 32x32x5 batch 4")
        assert 0 <= ready < batch_4, log_tail(log)
        assert "the larger batch sizes follow while serving" in log.read_text()
    finally:
        stop(server)


def test_a_server_told_so_warms_every_batch_size_before_answering(tmp_path: Path) -> None:
    server, url, log = start_server(tmp_path, "--no-warmup-in-background")
    try:
        first = httpx.get(url + "/health", timeout=5).json()
        assert first["warmup"]["complete"] is True and first["warmup"]["runs_done"] == 2
        ready, batch_4 = lines_of(log, "ready to serve", "warm-up 32x32x5 batch 4")
        assert 0 <= batch_4 < ready, log_tail(log)
    finally:
        stop(server)


def test_a_server_without_a_warm_up_is_warm_once_it_answers(tmp_path: Path) -> None:
    server, url, _log = start_server(tmp_path, "--warmup", "")
    try:
        assert "warmup" not in httpx.get(url + "/health", timeout=5).json()
        assert asyncio.run(wait_until_warm([url], timeout_s=5)) == []
    finally:
        stop(server)


def test_a_failed_warm_up_run_leaves_batches_smaller_and_the_server_serving(
    generator: VideoGenerator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = Warmup(generator, [SIZE], max_batch=4)
    plan.before_serving()
    real = generator.generate_batch

    def out_of_memory_at_batch_4(items, on_result):
        if len(items) == 4:
            raise RuntimeError("CUDA out of memory (as a GPU would say)")
        return real(items, on_result)

    monkeypatch.setattr(generator, "generate_batch", out_of_memory_at_batch_4)
    manager = JobManager(
        generator, tmp_path / "out", "tiny", EngineMetrics("tiny"), max_batch=4, batch_wait_ms=5000, warmup=plan
    )
    manager.start()  # nothing queued: the worker makes the batch-4 run, which fails
    try:
        wait_for(lambda: plan.failed, "the failed warm-up run", 60)
        assert "out of memory" in plan.status()["failed"] and not plan.pending and not plan.complete
        assert plan.batch_limit(params(1)) == 1
        jobs = [manager.submit(manager.new_job(params(30 + i), fps=8)) for i in range(2)]
        for job in jobs:
            assert job.done.wait(60) and job.status.value == "completed", job.error
        assert [job.batch_size for job in jobs] == [1, 1]
    finally:
        manager.shutdown()
