"""The engine server's start-up and life: load the model, warm it up, then serve the API until stopped."""

from __future__ import annotations

import gc
import logging
import tempfile
import time
from pathlib import Path

from studio.config import DEFAULT_GPU_WARMUP, EngineSettings


def serve_engine(settings: EngineSettings, log: logging.Logger) -> int:
    """Serve until uvicorn stops; the exit status (2: the model, the warm-up sizes or the blocklist could not
    be read). The caller may keep the garbage collector off until here: it is turned on once start-up is done,
    with what start-up made frozen out of its passes."""
    # Heavy imports here, so that a caller's --help and bad flags answer at once.
    import uvicorn

    from studio.engine.api import EngineState, create_app
    from studio.engine.generation import ModelLoadError
    from studio.engine.generator import VideoGenerator
    from studio.engine.guard import TextGuard
    from studio.engine.jobs import JobManager
    from studio.engine.metrics import EngineMetrics
    from studio.engine.warmup import parse_sizes

    try:
        warmup_sizes = parse_sizes(settings.warmup or "")
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    started = time.perf_counter()
    try:
        generator = VideoGenerator(
            settings.model,
            device=settings.device,
            threads=settings.threads,
            compile=settings.compile,
            compile_mode=settings.compile_mode,
            attention_backend=settings.attention_backend,
            cuda_graphs=settings.cuda_graphs,
            fused_kernels=settings.fused_kernels,
            tune_kernels=settings.tune_kernels,
            text_cache_size=settings.text_cache_size,
        )
        generator.load()
    except ModelLoadError as exc:
        log.error("%s", exc)
        return 2
    gpu = generator.device == "cuda"
    max_batch = settings.max_batch or (8 if gpu else 1)
    if settings.warmup is None and gpu:
        warmup_sizes = parse_sizes(DEFAULT_GPU_WARMUP)
    if warmup_sizes:
        warmup_started = time.perf_counter()
        timings = generator.warmup(warmup_sizes, max_batch=max_batch)
        log.info("warm-up (compile and autotune) took %.1f s: %s", time.perf_counter() - warmup_started, timings)
    log.info("ready to serve %.1f s after start-up began", time.perf_counter() - started)
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
    )
    app = create_app(state)
    gc.freeze()
    gc.enable()
    log.info(
        "serving %s on http://%s:%d (device %s, guardrails %s, max batch %d)",
        settings.model_name,
        settings.host,
        settings.port,
        generator.device,
        "on" if guard else "off",
        max_batch,
    )
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    finally:
        manager.shutdown()
    return 0
