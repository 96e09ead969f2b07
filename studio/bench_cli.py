"""The terminal side of `omni-studio bench`: argument checks, the run, the summary table, the recommendation."""

from __future__ import annotations

import argparse
import asyncio

from rich.console import Console
from rich.table import Table

from studio.backend.bench import BenchConfig, check_tiers, parse_guardrails, parse_list, run_bench
from studio.backend.launchers import LaunchError
from studio.backend.supervisor import ServerStartError
from studio.config import StudioSettings
from studio.tiers import TierError, normalize_frames


def _config(args: argparse.Namespace) -> BenchConfig:
    concurrencies = parse_list(args.concurrency, int)
    if not concurrencies or any(c < 1 or c > 256 for c in concurrencies):
        raise ValueError("--concurrency takes numbers from 1 to 256, e.g. 1,4,16")
    if args.requests < 1:
        raise ValueError("--requests must be at least 1")
    if args.replicas < 1:
        raise ValueError("--replicas must be at least 1")
    if args.request_rate is not None and args.request_rate <= 0:
        raise ValueError("--request-rate must be positive")
    tier_list = check_tiers(parse_list(args.tier))
    if args.frames is not None:
        for tier in tier_list:
            normalize_frames(args.frames, tier)
    prompts = None
    if args.prompts is not None:
        prompts = [line.strip() for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"{args.prompts} has no prompts")
    return BenchConfig(
        requests=args.requests,
        concurrencies=concurrencies,
        tiers=tier_list,
        aspect=args.aspect,
        frames=args.frames,
        steps=args.steps,
        guardrails=parse_guardrails(args.bench_guardrails),
        request_rate=args.request_rate,
        warmup=max(0, args.warmup),
        slo_s=args.slo_seconds,
        **({"prompts": prompts} if prompts else {}),
    )


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def run_bench_command(args: argparse.Namespace, settings: StudioSettings) -> int:
    console = Console(stderr=True, soft_wrap=True)
    try:
        config = _config(args)
    except (ValueError, TierError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    try:
        report = asyncio.run(run_bench(settings, config, args.out, replicas=args.replicas, console=console))
    except (ServerStartError, LaunchError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    table = Table(title="omni-studio bench")
    for name in (
        "tier",
        "guard",
        "conc",
        "endpoints",
        "done",
        "failed",
        "p50 s",
        "p90 s",
        "p99 s",
        "queue s",
        "infer s",
        "videos/min",
        "goodput",
    ):
        table.add_column(name, justify="right")
    for row in report["cells"]:
        table.add_row(
            row["tier"],
            "on" if row["guardrails"] else "off",
            str(row["concurrency"]),
            str(row["endpoints"]),
            str(row["completed"]),
            str(row["failed"]),
            _fmt(row["latency_p50_s"]),
            _fmt(row["latency_p90_s"]),
            _fmt(row["latency_p99_s"]),
            _fmt(row["queue_wait_mean_s"]),
            _fmt(row["inference_mean_s"]),
            _fmt(row["videos_per_min"]),
            _fmt(row["goodput"]),
        )
    out = Console(soft_wrap=True, width=None if Console().is_terminal else 160)
    out.print(table)
    out.print(f"report: {args.out / 'report.json'} (requests.csv, summary.csv, *.png beside it)")
    out.print("recommendation:")
    for line in report["recommendation"]:
        out.print(f"  {line}")
    return 0
