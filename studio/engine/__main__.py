"""`python -m studio.engine --model PATH --host 127.0.0.1 --port P [--api-key K] [--no-guardrails]
[--max-batch B] [--batch-wait-ms MS] [--compile auto|off|blocks|full] [--warmup WxHxF,...]`."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import tempfile
import time
from pathlib import Path

from studio.config import EngineSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m studio.engine",
        description="The embedded engine: the vLLM-Omni video API over a diffusers pipeline.",
    )
    parser.add_argument("--model", help="diffusers pipeline directory (or hub id where a network exists)")
    parser.add_argument("--served-model-name", help="the name clients send as `model` (default: dir name)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--api-key", help="require this bearer key on /v1 (better: env VLLM_API_KEY)")
    parser.add_argument(
        "--no-guardrails",
        dest="guardrails",
        action="store_false",
        default=None,
        help="turn the text guardrail off server-wide",
    )
    parser.add_argument("--blocklist", type=Path, help="the guardrail's blocklist file")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--output-dir", type=Path, help="where finished mp4s are kept (default: a temp dir)")
    parser.add_argument("--default-steps", type=int, help="steps when a request sends none")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--max-batch", type=int, help="jobs of one shape per denoising loop (default: 8 on a GPU, 1 on CPU)"
    )
    parser.add_argument("--batch-wait-ms", type=float, help="longest a queued job waits for partners (default 200)")
    parser.add_argument(
        "--compile",
        choices=["auto", "off", "blocks", "full"],
        help="torch.compile of the transformer (auto: blocks on a GPU)",
    )
    parser.add_argument("--compile-mode", help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    parser.add_argument("--attention-backend", help="diffusers attention backend (auto: the fastest measured)")
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay the transformer as CUDA graphs at the warmed shapes (default on; GPU only)",
    )
    parser.add_argument(
        "--fused-kernels",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the engine's fused kernels in a Wan transformer, checked against the plain forward at load "
        "(default on; GPU only)",
    )
    parser.add_argument(
        "--tune-kernels",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time the block sizes of the compiler's fused kernels at warm-up: a longer first start-up, "
        "slightly faster steps (default on; GPU only)",
    )
    parser.add_argument(
        "--warmup",
        help="WxHxF sizes to run before serving, comma-separated ('' for none; default on a GPU: 256p and 480p 16:9, 33 frames)",
    )
    parser.add_argument("--encode-workers", type=int, help="mp4 encoding threads beside the GPU (default: 8 on a GPU)")
    return parser


DEFAULT_GPU_WARMUP = "320x192x33,832x480x33"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    settings = EngineSettings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    log = logging.getLogger("studio.engine")
    if settings.host not in ("127.0.0.1", "localhost", "::1") and settings.api_key is None:
        log.warning("binding %s without an API key: anyone who can reach it can use it", settings.host)

    # Heavy imports after argument parsing so that --help and bad flags answer at once. The cyclic garbage
    # collector stays off while torch, diffusers and the model load: they make millions of objects and almost no
    # garbage, and its passes over them were a sixth of the start-up. What start-up made is then frozen out of
    # later passes.
    gc.disable()
    try:
        return _serve(settings, log)
    finally:
        gc.enable()


def _serve(settings: EngineSettings, log: logging.Logger) -> int:
    import uvicorn

    from studio.engine.api import EngineState, create_app
    from studio.engine.guard import TextGuard
    from studio.engine.jobs import JobManager
    from studio.engine.metrics import EngineMetrics
    from studio.engine.pipeline import ModelLoadError, PipelineRunner, parse_sizes

    try:
        warmup_sizes = parse_sizes(settings.warmup or "")
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    started = time.perf_counter()
    try:
        runner = PipelineRunner(
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
        runner.load()
    except ModelLoadError as exc:
        log.error("%s", exc)
        return 2
    gpu = runner.device == "cuda"
    max_batch = settings.max_batch or (8 if gpu else 1)
    if settings.warmup is None and gpu:
        warmup_sizes = parse_sizes(DEFAULT_GPU_WARMUP)
    if warmup_sizes:
        warmup_started = time.perf_counter()
        timings = runner.warmup(warmup_sizes, max_batch=max_batch)
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
        runner,
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
        runner.device,
        "on" if guard else "off",
        max_batch,
    )
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    finally:
        manager.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
