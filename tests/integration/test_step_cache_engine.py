"""The step cache on the CPU, through the engine's own loop over the tiny Wan: it skips the transformer at the
steps its schedule says and no others, a batch shares one schedule, its jobs say the lever in their record, and a
pipeline without the engine's loop (the small model) refuses it, at start and per request."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest

from studio.backend.servers.supervisor import free_port
from studio.config import DEFAULT_MODEL_DIR, TINY_WAN_DIR
from studio.engine.batching import batch_key
from studio.engine.generation_types import GenerationParams
from studio.engine.generator import VideoGenerator
from studio.engine.step_cache import StepCacheMode, StepCachePolicy
from tests.conftest import SMALL

TAYLOR = StepCachePolicy(StepCacheMode.TAYLOR, interval=2, warm_fraction=0.2, final_steps=1)


def params(policy: StepCachePolicy = StepCachePolicy(), seed: int = 7) -> GenerationParams:
    return GenerationParams(
        prompt="a red circle moving left",
        width=32,
        height=32,
        num_frames=5,
        num_inference_steps=10,
        guidance_scale=5.0,
        seed=seed,
        step_cache=policy,
    )


@pytest.fixture(scope="module")
def generator() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    return generator


def forwards_and_frames(generator: VideoGenerator, request: GenerationParams) -> tuple[int, np.ndarray]:
    calls = []
    handle = generator.pipe.transformer.register_forward_hook(lambda *_: calls.append(1))
    try:
        frames = generator.generate(request).frames.astype(int)
    finally:
        handle.remove()
    return len(calls), frames


def test_the_transformer_runs_only_at_the_computed_steps(generator: VideoGenerator) -> None:
    exact_calls, exact = forwards_and_frames(generator, params())
    again_calls, again = forwards_and_frames(generator, params(StepCachePolicy(StepCacheMode.REUSE, interval=1)))
    cached_calls, cached = forwards_and_frames(generator, params(TAYLOR))
    assert exact_calls == 10 and again_calls == 10  # one call per step: guidance's halves share it
    assert cached_calls == TAYLOR.computed_count(10) == 6
    assert np.array_equal(exact, again)  # an interval of 1 is no cache at all
    assert cached.shape == exact.shape and not np.array_equal(cached, exact)  # the estimates were used


def test_a_batch_shares_one_schedule_and_the_exact_default_batches_apart() -> None:

    class Facts:
        batched_loop = True
        call_parameters: frozenset[str] = frozenset()

        @staticmethod
        def native_size(width: int, height: int) -> tuple[int, int]:
            return width, height

    assert batch_key(Facts, params(TAYLOR, seed=1)) == batch_key(Facts, params(TAYLOR, seed=2))
    assert batch_key(Facts, params(TAYLOR)) != batch_key(Facts, params())


def test_a_job_of_the_wan_engine_says_its_step_cache(wan_engine) -> None:
    form = {**SMALL, "prompt": "a red circle", "num_inference_steps": "6", "extra_params": '{"step_cache": "taylor"}'}
    with httpx.Client(base_url=wan_engine.base_url, timeout=60.0) as http:
        record = http.post("/v1/videos/sync", data=form)
        assert record.status_code == 200, record.text
        job = http.post("/v1/videos", data=form).json()
        done = http.get(f"/v1/videos/{job['id']}").json()
        exact = http.post("/v1/videos", data={**SMALL, "prompt": "a red circle"}).json()
    assert done["levers"]["step_cache"].startswith("taylor, every 2")
    assert "levers" not in exact  # an exact job's record is vLLM-Omni's


def test_the_small_model_refuses_a_step_cache_per_request(engine) -> None:
    form = {**SMALL, "prompt": "a red circle", "extra_params": '{"step_cache": "reuse"}'}
    with httpx.Client(base_url=engine.base_url, timeout=30.0) as http:
        refused = http.post("/v1/videos", data=form)
        unknown = http.post("/v1/videos", data={**form, "extra_params": '{"step_cache": "teacache"}'})
        off = http.post("/v1/videos", data={**form, "extra_params": '{"step_cache": "off"}'})
    assert refused.status_code == 400 and "has no step cache" in refused.json()["error"]["message"]
    assert unknown.status_code == 400 and "step_cache" in unknown.text
    assert off.status_code == 200


def start_engine(tmp_path, model, *flags: str) -> subprocess.CompletedProcess:
    """An engine process started on the CPU with `flags`, until it exits (a refusal at start ends it)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "studio.engine",
            "--model",
            str(model),
            "--port",
            str(free_port()),
            "--threads",
            "1",
            "--output-dir",
            str(tmp_path),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_small_model_refuses_a_step_cache_at_start(tmp_path) -> None:
    started = start_engine(tmp_path, DEFAULT_MODEL_DIR, "--step-cache", "taylor")
    assert started.returncode == 2
    said = started.stdout + started.stderr  # the engine logs to its standard output
    assert "which has no step cache" in said and "--step-cache off" in said


@pytest.mark.parametrize("model", [TINY_WAN_DIR, DEFAULT_MODEL_DIR], ids=["tiny-wan", "small-model"])
def test_fp8_is_refused_at_start_where_it_cannot_run(tmp_path, model) -> None:
    """No CUDA GPU here: the engine must not start in bf16 when fp8 was asked for, whatever the pipeline."""
    started = start_engine(tmp_path, model, "--device", "cpu", "--quantization", "fp8")
    assert started.returncode == 2
    said = started.stdout + started.stderr
    assert "--quantization fp8: fp8 matmuls need a CUDA GPU" in said and "--quantization none" in said


@pytest.mark.parametrize(
    ("backend", "needs"),
    [("sage", "SageAttention needs a CUDA GPU"), ("flash3", "FlashAttention 3 needs a CUDA GPU")],
    ids=["sage", "flash3"],
)
@pytest.mark.parametrize("model", [TINY_WAN_DIR, DEFAULT_MODEL_DIR], ids=["tiny-wan", "small-model"])
def test_an_attention_kernel_of_the_engines_own_is_refused_at_start_where_it_cannot_run(
    tmp_path, model, backend, needs
) -> None:
    """SageAttention and FlashAttention 3 need a CUDA GPU and their built packages: here the engine must refuse them,
    not serve another kernel under their name."""
    started = start_engine(tmp_path, model, "--device", "cpu", "--attention-backend", backend)
    assert started.returncode == 2
    said = started.stdout + started.stderr
    assert f"--attention-backend {backend}: {needs}" in said
    assert "--attention-backend auto" in said
