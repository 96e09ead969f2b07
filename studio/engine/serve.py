"""The engine server's start-up and life, as named steps: read the start-up plan from the settings, load the model,
warm it up, then serve the API until stopped.

Its imports are the heavy ones (torch, the pipeline): studio/engine/__main__.py imports it only once the flags are
read, so that `--help` and a bad flag answer at once.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from studio.engine.allocator import IDLE_RELEASE_AFTER_S, release_freed_blocks
from studio.engine.api import create_app
from studio.engine.generation_types import ModelLoadError
from studio.engine.generator import VideoGenerator
from studio.engine.gpu.compile_cache import CompileCache, cache_key, default_cache_root
from studio.engine.guard import TextGuard
from studio.engine.jobs import IdleHook, JobManager
from studio.engine.loader import resolve_device
from studio.engine.metrics import EngineMetrics
from studio.engine.parallel import ParallelSettings
from studio.engine.previews import PreviewSettings
from studio.engine.serving import EngineState
from studio.engine.step_cache import StepCachePolicy, parse_policy
from studio.engine.warmup import Warmup, parse_sizes
from studio.settings import DEFAULT_GPU_WARMUP, EngineSettings

# Seconds a lost rank gives the server to stop by itself before the process ends regardless (a request stuck
# in a collective with the lost rank never returns).
LOST_RANK_GRACE_S = 60.0


class StartupError(Exception):
    """A start-up step that cannot go on: its message is logged, and the engine exits with status 2."""


@dataclass
class StartPlan:
    """What start-up reads from the settings before it loads anything."""

    device: str
    parallel: ParallelSettings
    warmup_sizes: list[tuple[int, int, int]]
    max_batch: int
    cache: CompileCache | None


@dataclass
class EngineParts:
    """What start-up made beside the generator, that the API serves with."""

    warmup: Warmup | None
    guard: TextGuard | None
    step_cache: StepCachePolicy


def serve_engine(settings: EngineSettings, log: logging.Logger) -> int:
    """Serve until uvicorn stops; the exit status (2: the model, the warm-up sizes or the blocklist could not
    be read). The caller may keep the garbage collector off until here: it is turned on once start-up is done,
    with what start-up made frozen out of its passes."""
    started = time.perf_counter()
    try:
        plan = plan_start(settings)
        generator = load(settings, plan)
        try:
            step_cache = server_step_cache(settings, generator)
            warmup = warm(settings, plan, generator, log)
        except BaseException:
            generator.close()
            raise
        log.info(
            "ready to serve %.1f s after start-up began (%s)",
            time.perf_counter() - started,
            cache_state(plan.cache),
        )
        guard = read_guard(settings)
    except StartupError as exc:
        log.error("%s", exc)
        return 2
    serve(settings, plan, generator, EngineParts(warmup, guard, step_cache), log)
    return 0


def plan_start(settings: EngineSettings) -> StartPlan:
    """The device, the ranks, the warm-up sizes (a GPU warms a default set where none is given), the largest batch
    and the compile cache."""
    try:
        warmup_sizes = parse_sizes(settings.warmup or "")
        parallel = ParallelSettings.of(settings)
        device = resolve_device(settings.device)
    except (ValueError, ModelLoadError) as exc:
        raise StartupError(str(exc)) from exc
    gpu = device == "cuda"
    max_batch = settings.max_batch or (8 if gpu else 1)
    if settings.warmup is None and gpu:
        warmup_sizes = parse_sizes(DEFAULT_GPU_WARMUP)
    cache = compile_cache_for(settings, device, warmup_sizes, max_batch, parallel)
    return StartPlan(device, parallel, warmup_sizes, max_batch, cache)


def load(settings: EngineSettings, plan: StartPlan) -> VideoGenerator:
    """The model loaded with the settings' levers; a lost rank stops the server."""
    try:
        generator = VideoGenerator(
            settings.model,
            device=plan.device,
            threads=settings.threads,
            compile=settings.compile,
            compile_mode=settings.compile_mode,
            attention_backend=settings.attention_backend,
            cuda_graphs=settings.cuda_graphs,
            fused_kernels=settings.fused_kernels,
            tune_kernels=settings.tune_kernels,
            text_cache_size=settings.text_cache_size,
            parallel=plan.parallel,
            compile_cache=plan.cache,
            quantization=settings.quantization,
        )
        generator.load()
    except ModelLoadError as exc:
        raise StartupError(str(exc)) from exc
    if generator.rank is not None and generator.rank.followers is not None:
        generator.rank.followers.on_lost = _stop_serving
    return generator


def server_step_cache(settings: EngineSettings, generator: VideoGenerator) -> StepCachePolicy:
    """The server's step cache. Refused at start, not ignored, where the pipeline cannot run it: a user who asked
    for fewer steps' work would otherwise measure none."""
    step_cache = parse_policy(
        settings.step_cache,
        settings.step_cache_interval,
        settings.step_cache_warm_fraction,
        settings.step_cache_final_steps,
    )
    if step_cache.active and not generator.batched_loop:
        raise StartupError(
            f"--step-cache {settings.step_cache}: {settings.model} runs through its pipeline's own call, which has "
            "no step cache (only Wan pipelines, on the engine's own denoising loop, have one); start it with "
            "--step-cache off"
        )
    return step_cache


def warm(settings: EngineSettings, plan: StartPlan, generator: VideoGenerator, log: logging.Logger) -> Warmup | None:
    """Compile and autotune at the warm-up sizes before serving (the larger batch sizes while serving, where the
    settings say so); None where there are no sizes to warm."""
    if not plan.warmup_sizes:
        return None
    warmup = Warmup(generator, plan.warmup_sizes, plan.max_batch)
    warmup_started = time.perf_counter()
    timings = warmup.before_serving() if settings.warmup_in_background else warmup.run_all()
    log.info(
        "warm-up (compile and autotune) took %.1f s%s: %s",
        time.perf_counter() - warmup_started,
        "; the larger batch sizes follow while serving" if warmup.pending else "",
        timings,
    )
    return warmup


def read_guard(settings: EngineSettings) -> TextGuard | None:
    """The guardrails' blocklist, where guardrails are on."""
    if not settings.guardrails:
        return None
    try:
        return TextGuard.from_file(settings.blocklist)
    except OSError as exc:
        raise StartupError(f"cannot read the guardrail blocklist {settings.blocklist}: {exc}") from exc


def serve(
    settings: EngineSettings, plan: StartPlan, generator: VideoGenerator, parts: EngineParts, log: logging.Logger
) -> None:
    """Start the jobs and serve the API until uvicorn stops; then stop the jobs and close the generator."""
    manager = start_jobs(settings, plan, generator, parts.warmup)
    app = create_app(engine_state(settings, manager, generator, parts))
    gc.freeze()
    gc.enable()
    log.info(
        "serving %s on http://%s:%d (device %s, guardrails %s, max batch %d, previews %s, step cache %s, "
        "quantization %s)",
        settings.model_name,
        settings.host,
        settings.port,
        generator.device,
        "on" if parts.guard else "off",
        plan.max_batch,
        f"every {settings.preview_interval_s:g} s at most" if settings.previews else "off",
        parts.step_cache.label(),
        "fp8" if generator.levers.get("quantization") == "fp8" else "none",
    )
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    finally:
        manager.shutdown()
        generator.close()


def start_jobs(
    settings: EngineSettings, plan: StartPlan, generator: VideoGenerator, warmup: Warmup | None
) -> JobManager:
    """The job manager, started: its queue, batching worker and encoders, writing into the output folder (a fresh
    temporary one where none is set)."""
    gpu = plan.device == "cuda"
    output_dir = settings.output_dir or Path(tempfile.mkdtemp(prefix="omni-studio-engine-"))
    manager = JobManager(
        generator,
        output_dir,
        settings.model_name,
        EngineMetrics(settings.model_name),
        max_kept_jobs=settings.max_kept_jobs,
        max_batch=plan.max_batch,
        batch_wait_ms=settings.batch_wait_ms,
        encode_workers=settings.encode_workers if settings.encode_workers is not None else (8 if gpu else 0),
        warmup=warmup,
        previews=PreviewSettings(enabled=settings.previews, interval_s=settings.preview_interval_s),
        when_idle=None if gpu else IdleHook(IDLE_RELEASE_AFTER_S, release_freed_blocks),
    )
    manager.start()
    return manager


def engine_state(
    settings: EngineSettings, manager: JobManager, generator: VideoGenerator, parts: EngineParts
) -> EngineState:
    return EngineState(
        manager=manager,
        guard=parts.guard,
        model_name=settings.model_name,
        model_root=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        started_at=time.time(),
        default_steps=settings.default_steps,
        default_guidance=settings.default_guidance,
        sync_timeout_s=settings.sync_timeout_s,
        warmup=parts.warmup,
        step_cache=parts.step_cache,
        step_cache_possible=generator.batched_loop,
    )


def cache_state(cache: CompileCache | None) -> str:
    if cache is None:
        return "no compile cache"
    return "compile cache warm" if cache.warm else "compile cache cold"


def compile_cache_for(
    settings: EngineSettings,
    device: str,
    sizes: Sequence[tuple[int, int, int]],
    max_batch: int,
    parallel: ParallelSettings,
) -> CompileCache | None:
    """The compile cache of this engine's start-up work, where something is compiled or measured (a GPU, or
    compile asked for on a CPU) and the cache is not turned off (settings `compile_cache`,
    `compile_cache_dir`)."""
    if not settings.compile_cache:
        return None
    if device != "cuda" and settings.compile in ("auto", "off"):
        return None
    options = {
        "compile": settings.compile,
        "compile_mode": settings.compile_mode,
        "attention_backend": settings.attention_backend,
        "cuda_graphs": settings.cuda_graphs,
        "fused_kernels": settings.fused_kernels,
        "tune_kernels": settings.tune_kernels,
        "quantization": settings.quantization,
        "cfg_parallel_size": parallel.cfg_parallel_size,
        "ulysses_degree": parallel.ulysses_degree,
    }
    root = settings.compile_cache_dir or default_cache_root()
    return CompileCache(Path(root), cache_key(settings.model, device, sizes, max_batch, options))


def _stop_serving(reason: str) -> None:
    """A rank was lost: the server stops (its supervisor may start it again); past a grace period the process
    ends regardless."""
    logging.getLogger("studio.engine").error("stopping the server: %s", reason)
    threading.Timer(LOST_RANK_GRACE_S, os._exit, args=(3,)).start()
    os.kill(os.getpid(), signal.SIGTERM)
