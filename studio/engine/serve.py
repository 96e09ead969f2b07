"""The engine server's start-up and life: load the model, warm it up, then serve the API until stopped."""

from __future__ import annotations

import gc
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from studio.settings import DEFAULT_GPU_WARMUP, EngineSettings

if TYPE_CHECKING:
    from studio.engine.gpu.compile_cache import CompileCache
    from studio.engine.parallel import ParallelSettings

# Seconds a lost rank gives the server to stop by itself before the process ends regardless (a request stuck
# in a collective with the lost rank never returns).
LOST_RANK_GRACE_S = 60.0


def serve_engine(settings: EngineSettings, log: logging.Logger) -> int:
    """Serve until uvicorn stops; the exit status (2: the model, the warm-up sizes or the blocklist could not
    be read). The caller may keep the garbage collector off until here: it is turned on once start-up is done,
    with what start-up made frozen out of its passes."""
    # Heavy imports here, so that a caller's --help and bad flags answer at once.
    import uvicorn

    from studio.engine.api import EngineState, create_app
    from studio.engine.generation_types import ModelLoadError
    from studio.engine.generator import VideoGenerator
    from studio.engine.guard import TextGuard
    from studio.engine.jobs import JobManager
    from studio.engine.loader import resolve_device
    from studio.engine.metrics import EngineMetrics
    from studio.engine.parallel import ParallelSettings
    from studio.engine.previews import PreviewSettings
    from studio.engine.step_cache import parse_policy
    from studio.engine.warmup import Warmup, parse_sizes

    started = time.perf_counter()
    try:
        warmup_sizes = parse_sizes(settings.warmup or "")
        parallel = ParallelSettings.of(settings)
        device = resolve_device(settings.device)
    except (ValueError, ModelLoadError) as exc:
        log.error("%s", exc)
        return 2
    gpu = device == "cuda"
    max_batch = settings.max_batch or (8 if gpu else 1)
    if settings.warmup is None and gpu:
        warmup_sizes = parse_sizes(DEFAULT_GPU_WARMUP)
    cache = compile_cache_for(settings, device, warmup_sizes, max_batch, parallel)
    try:
        generator = VideoGenerator(
            settings.model,
            device=device,
            threads=settings.threads,
            compile=settings.compile,
            compile_mode=settings.compile_mode,
            attention_backend=settings.attention_backend,
            cuda_graphs=settings.cuda_graphs,
            fused_kernels=settings.fused_kernels,
            tune_kernels=settings.tune_kernels,
            text_cache_size=settings.text_cache_size,
            parallel=parallel,
            compile_cache=cache,
            quantization=settings.quantization,
        )
        generator.load()
    except ModelLoadError as exc:
        log.error("%s", exc)
        return 2
    if generator.rank is not None and generator.rank.followers is not None:
        generator.rank.followers.on_lost = _stop_serving
    step_cache = parse_policy(
        settings.step_cache,
        settings.step_cache_interval,
        settings.step_cache_warm_fraction,
        settings.step_cache_final_steps,
    )
    if step_cache.active and not generator.batched_loop:
        # Refused at start, not ignored: a user who asked for fewer steps' work would otherwise measure none.
        log.error(
            "--step-cache %s: %s runs through its pipeline's own call, which has no step cache (only Wan pipelines, "
            "on the engine's own denoising loop, have one); start it with --step-cache off",
            settings.step_cache,
            settings.model,
        )
        generator.close()
        return 2
    warmup = Warmup(generator, warmup_sizes, max_batch) if warmup_sizes else None
    try:
        if warmup is not None:
            warmup_started = time.perf_counter()
            timings = warmup.before_serving() if settings.warmup_in_background else warmup.run_all()
            log.info(
                "warm-up (compile and autotune) took %.1f s%s: %s",
                time.perf_counter() - warmup_started,
                "; the larger batch sizes follow while serving" if warmup.pending else "",
                timings,
            )
    except BaseException:
        generator.close()
        raise
    log.info(
        "ready to serve %.1f s after start-up began (%s)",
        time.perf_counter() - started,
        ("compile cache warm" if cache.warm else "compile cache cold") if cache is not None else "no compile cache",
    )
    guard = None
    if settings.guardrails:
        try:
            guard = TextGuard.from_file(settings.blocklist)
        except OSError as exc:
            log.error("cannot read the guardrail blocklist %s: %s", settings.blocklist, exc)
            return 2
    output_dir = settings.output_dir or Path(tempfile.mkdtemp(prefix="omni-studio-engine-"))
    metrics = EngineMetrics(settings.model_name)
    manager = JobManager(
        generator,
        output_dir,
        settings.model_name,
        metrics,
        max_kept_jobs=settings.max_kept_jobs,
        max_batch=max_batch,
        batch_wait_ms=settings.batch_wait_ms,
        encode_workers=settings.encode_workers if settings.encode_workers is not None else (8 if gpu else 0),
        warmup=warmup,
        previews=PreviewSettings(enabled=settings.previews, interval_s=settings.preview_interval_s),
    )
    manager.start()
    state = EngineState(
        manager=manager,
        guard=guard,
        model_name=settings.model_name,
        model_root=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        started_at=time.time(),
        default_steps=settings.default_steps,
        default_guidance=settings.default_guidance,
        sync_timeout_s=settings.sync_timeout_s,
        warmup=warmup,
        step_cache=step_cache,
        step_cache_possible=generator.batched_loop,
    )
    app = create_app(state)
    gc.freeze()
    gc.enable()
    log.info(
        "serving %s on http://%s:%d (device %s, guardrails %s, max batch %d, previews %s, step cache %s, "
        "quantization %s)",
        settings.model_name,
        settings.host,
        settings.port,
        generator.device,
        "on" if guard else "off",
        max_batch,
        f"every {settings.preview_interval_s:g} s at most" if settings.previews else "off",
        step_cache.label(),
        "fp8" if generator.levers.get("quantization") == "fp8" else "none",
    )
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    finally:
        manager.shutdown()
        generator.close()
    return 0


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
    from studio.engine.gpu.compile_cache import CompileCache, cache_key, default_cache_root

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
