"""`omni-studio ui | generate | engine | doctor`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from studio import tiers
from studio.config import StudioSettings, load_settings
from studio.startup import collector_paused

EXIT_USAGE = 2
EXIT_FAILED = 1


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument(
        "--engine",
        choices=["embedded", "vllm-omni", "remote"],
        help="embedded (default), a managed `vllm serve --omni`, or running servers",
    )
    group.add_argument(
        "--url",
        action="append",
        dest="remote_urls",
        help="a running server, http://host:port or http://host:port/v1 (repeatable)",
    )
    group.add_argument("--api-key", help="bearer key of the server (better: OMNI_STUDIO_API_KEY)")
    group.add_argument("--model", help="model dir or hub id the managed server serves")
    group.add_argument("--served-model-name")
    group.add_argument("--device", choices=["auto", "cpu", "cuda"], help="embedded engine's device")
    group.add_argument("--vllm", dest="vllm_executable", help="the `vllm` command, or the venv that has it")
    group.add_argument("--tp", "--tensor-parallel-size", dest="tensor_parallel_size", type=int)
    group.add_argument("--cfg-parallel-size", type=int)
    group.add_argument("--ulysses-degree", type=int)
    group.add_argument("--model-class-name")
    group.add_argument("--gpus", help="GPU indices for the managed server, e.g. 0,1,2,3")
    group.add_argument("--init-timeout", dest="init_timeout_s", type=float, help="seconds to wait for ready")
    group.add_argument("--serve-args", dest="extra_serve_args", help="more `vllm serve` flags, one string")
    group.add_argument(
        "--docker",
        dest="use_docker",
        action="store_true",
        default=None,
        help="run vllm serve in NVIDIA's container",
    )
    group.add_argument(
        "--server-guardrails",
        dest="guardrails",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="server-wide guardrails of a managed server (default on)",
    )
    group.add_argument(
        "--allow-risky-serve-args",
        dest="allow_risky_serve_args",
        action="store_true",
        default=None,
        help="confirm --serve-args that widen exposure (--host, --allowed-local-media-path)",
    )
    group.add_argument(
        "--auto-restart",
        dest="auto_restart",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="restart a managed server that crashes and send again what it had not started (default off)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omni-studio", description="Video generation studio for vLLM-Omni")
    sub = parser.add_subparsers(dest="command", required=True)

    ui = sub.add_parser("ui", help="start the web studio")
    _add_engine_flags(ui)
    ui.add_argument("--host", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, help="port (default 7860)")
    ui.add_argument("--share", action="store_true", default=None, help="a public link through Gradio's tunnel")
    ui.add_argument("--auth", help="user:pass required to open the page")
    ui.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a non-loopback host or --share without --auth",
    )
    ui.add_argument("--out", dest="outputs_dir", type=Path, help="outputs dir (videos, sidecars, history)")

    gen = sub.add_parser("generate", help="make one video and print its mp4 path (last line)")
    gen.add_argument("prompt")
    gen.add_argument("--negative-prompt")
    gen.add_argument("--tier", choices=tiers.TIERS)
    gen.add_argument("--aspect", choices=tiers.ASPECTS, default="16:9")
    gen.add_argument("--frames", type=int, help="frames (rounded up to 4k+1; default per tier)")
    gen.add_argument("--fps", type=int, default=tiers.DEFAULT_FPS, help="10, 16, 24 or 30")
    gen.add_argument("--steps", type=int, help="denoising steps (default: the server's)")
    gen.add_argument("--guidance", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--no-guardrails", action="store_true", help="turn guardrails off for this request")
    gen.add_argument("--out", dest="outputs_dir", type=Path, help="outputs dir (default ./outputs)")
    gen.add_argument("--quiet", action="store_true", help="no progress display")
    _add_engine_flags(gen)

    bench = sub.add_parser("bench", help="measure latency and throughput over concurrency, tiers, replicas")
    _add_engine_flags(bench)
    bench.add_argument("--replicas", type=int, default=1, help="managed servers behind the router (default 1)")
    bench.add_argument("--engine-threads", dest="engine_threads", type=int, help="torch threads per embedded replica")
    bench.add_argument("--requests", type=int, default=16, help="measured requests per cell")
    bench.add_argument("--concurrency", default="1,4", help="comma list, e.g. 1,4,16")
    bench.add_argument("--tier", default="256p", help="comma list, e.g. 256p,480p")
    bench.add_argument("--aspect", default="16:9", choices=tiers.ASPECTS)
    bench.add_argument("--frames", type=int)
    bench.add_argument("--steps", type=int)
    bench.add_argument("--guardrails", dest="bench_guardrails", default="on", help="per request: on, off, or on,off")
    bench.add_argument("--request-rate", type=float, help="open loop: Poisson arrivals per second")
    bench.add_argument("--warmup", type=int, default=1, help="requests per cell before measuring")
    bench.add_argument("--slo-seconds", type=float, help="latency objective for goodput and the recommendation")
    bench.add_argument("--prompts", type=Path, help="a file with one prompt per line")
    bench.add_argument("--out", type=Path, required=True, help="report folder")

    eng = sub.add_parser("engine", help="run the embedded engine alone (python -m studio.engine)", add_help=False)
    eng.add_argument("engine_args", nargs=argparse.REMAINDER)

    doc = sub.add_parser("doctor", help="report GPUs, CUDA, vLLM-Omni, ports and disk")
    doc.add_argument("--json", action="store_true")
    doc.add_argument("--vllm", dest="vllm_executable")
    return parser


def _settings(args: argparse.Namespace) -> StudioSettings:
    names = set(StudioSettings.model_fields)
    return load_settings(**{k: v for k, v in vars(args).items() if k in names})


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"omni-studio: error: {message}", file=sys.stderr)
    return code


def _validation_text(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" if err["loc"] else err["msg"] for err in exc.errors()
    )


def _exit_on_sigterm() -> None:
    """SIGTERM ends the process without unwinding by default; turn it into SystemExit so that `finally`
    blocks and atexit hooks stop the servers this process started."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _exit_on_sigterm()
    if args.command == "engine":
        from studio.engine.__main__ import main as engine_main

        return engine_main(args.engine_args)
    try:
        if args.command == "generate":
            from studio.generate import run_generate  # light: it starts the engine, then imports the rest

            return run_generate(args, _settings(args))
        if args.command == "bench":
            with collector_paused():
                from studio.bench_cli import run_bench_command

            return run_bench_command(args, _settings(args))
        if args.command == "ui":
            with collector_paused():
                from studio.ui.launch import launch_ui

            return launch_ui(_settings(args))
        if args.command == "doctor":
            from studio.doctor import collect_report, format_report

            report = collect_report(_settings(args))
            print(json.dumps(report, indent=2) if args.json else format_report(report))
            return 0
    except ValidationError as exc:
        return _fail(_validation_text(exc))
    except KeyboardInterrupt:
        return 130
    return _fail(f"unknown command {args.command}")


if __name__ == "__main__":
    raise SystemExit(main())
