"""The engine's speed levers (fp8 matmuls, SageAttention, the step cache, and their combinations) against the
plain diffusers call, the compiled plain call and the exact engine, in one run, with fidelity.

The standard case is Cosmos 3's own clip length: 189 frames at 480p (a request of 74,880 tokens, where attention is
most of a forward's FLOPs); 720p is run as `--tiers 720p --frames 93`.

Model: benchmarks/harness/wan_model.py's Wan2.1-T2V-1.3B with random weights (its builder). One process: the plain call
(eager bf16, one request at a time) first; then, for each quantization, one VideoGenerator (compiled blocks, CUDA
graphs, the engine's kernels) on a transformer loaded with the same weights (the text encoder and the VAE are
shared), warmed at batch 1 for the latency tiers and up to the concurrency for the throughput tier; each
step-cache policy per request on it (a policy is part of a request's parameters, so one compile serves them all).

- Latency: one request at a time at each of --tiers, as a share of the plain call's median (after a warm-up call
  of --plain-warmup-steps) and of the compiled plain call's (`torch.compile(pipe.transformer)`, what a user tries
  first; compiled by a warm-up call of those steps before it is timed).
- Breakdown (on a GPU): the exact bf16 engine's request in parts (text encoder, attention, the rest of the
  transformer, VAE decode; the mp4 encode beside them), and its transformer's achieved TFLOP/s (the bf16 forward's
  FLOPs, whatever a variant computes them in) against the bf16 products' burst rate measured in the run, with the
  rate they hold for a second beside it (benchmarks/harness/breakdown.py).
- Throughput: --concurrency clients in a closed loop at --throughput-tier through the engine's JobManager (its
  batching scheduler and mp4 encoding), against the plain call one request after another.
- Fidelity: every video against the exact bf16 engine's of the same seed and prompt, frame by frame: mean and
  largest difference in uint8 levels, and PSNR. The weights are random, so this is a proxy for a trained model.

    python benchmarks/gpu/levers_gpu.py --out DIR                               # 480p, 189 frames
    python benchmarks/gpu/levers_gpu.py --out DIR --tiers 720p --frames 93 --no-compiled-plain
    python benchmarks/gpu/levers_gpu.py --out DIR --tiers '' --throughput-tier 256p
    python benchmarks/gpu/levers_gpu.py --out DIR --device cpu --smoke --quantizations bf16   # checks the script

Writes DIR/levers_gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import breakdown
from benchmarks.harness.engine_jobs import engine_params, run_engine_closed_loop, submit_and_wait
from benchmarks.harness.wan_calls import POLICIES, engine_call, engine_generate, plain_call
from benchmarks.harness.wan_model import (
    TIERS,
    TINY_TRANSFORMER,
    WAN_1_3B,
    build_pipeline,
    matmul_rate,
    matmul_rate_burst,
)
from benchmarks.harness.wan_vae import fidelity
from benchmarks.harness.wide_rows import ROW_LIMIT
from benchmarks.harness.wide_rows import use as use_row_limit
from studio.engine.generation_types import ModelLoadError
from studio.engine.generator import VideoGenerator
from studio.engine.gpu import fp8
from studio.engine.gpu.fp8 import Fp8Options
from studio.engine.jobs import JobManager
from studio.engine.metrics import EngineMetrics


@dataclass(frozen=True)
class Variant:
    """One way of running the engine's transformer: its quantization, how fp8 runs where it is asked for (the
    block layers it takes, the feed-forward's GELU in the cast's Triton kernel, fast accumulation in the fp8
    products), the GELU kernel's chunk (0: one pass over each row in registers), the attention backend, and the
    widest rows the compiler reduces in registers (benchmarks/experiments/wide_rows_gpu.py; 0: inductor's own choice, what the
    engine serves)."""

    quantization: str = "none"
    fp8_options: Fp8Options = field(default_factory=Fp8Options)
    gelu_chunk: int = fp8.GELU_CHUNK
    attention: str = "auto"
    row_limit: int = 0


# What `--quantization fp8` serves: both kinds of layers, the GELU kernel in two passes of chunks, fast accumulation.
SERVED_FP8 = Variant("fp8")
EXACT_ACCUM = Fp8Options(fast_accum=False)
QUANTIZATIONS = {
    "bf16": Variant(),
    "fp8": SERVED_FP8,
    # the GELU, row maximum and cast as inductor fuses them, products accumulated exactly (fp8 of 2026-12-02)
    "fp8-inductor-gelu": Variant("fp8", replace(EXACT_ACCUM, gelu_kernel=False)),
    # the GELU kernel in one pass over each row, products accumulated exactly (fp8 of 2026-12-03)
    "fp8-gelu-kernel": Variant("fp8", EXACT_ACCUM, gelu_chunk=0),
    # the served GELU kernel, products accumulated exactly
    "fp8-exact-accum": Variant("fp8", EXACT_ACCUM),
    "fp8-ffn": Variant("fp8", Fp8Options(("ffn",), gelu_kernel=False, fast_accum=False)),
    # SageAttention in the attention (on Hopper the engine builds its kernels at the first start, or takes them from
    # its cache: studio.engine.gpu.sage_build)
    "sage": Variant(attention="sage"),
    "fp8-sage": replace(SERVED_FP8, attention="sage"),  # `--quantization fp8 --attention-backend sage`
    # FlashAttention 3's exact Hopper kernel in the attention (built at the first start: studio.engine.gpu.flash3_build)
    "flash3": Variant(attention="flash3"),
    "fp8-flash3": replace(SERVED_FP8, attention="flash3"),
    # FlashAttention 3's fp8 forward in the attention (the same build): `--attention-backend flash3-fp8`
    "flash3-fp8": Variant(attention="flash3-fp8"),
    "fp8-flash3-fp8": replace(SERVED_FP8, attention="flash3-fp8"),
    # each norm's rows reduced in registers by the compiled blocks (benchmarks/experiments/wide_rows_gpu.py)
    "bf16-wide-rows": Variant(row_limit=ROW_LIMIT),
    "fp8-wide-rows": replace(SERVED_FP8, row_limit=ROW_LIMIT),
}

# The variants with exact arithmetic, any of which may be the reference the others' frames are compared with.
EXACT_VARIANTS = ("bf16", "flash3")
# The variants whose exact request is also reported in parts: the exact engine on each attention kernel, and 8-bit
# attention with fp8 products.
BROKEN_DOWN = ("bf16", "flash3", "sage", "fp8-sage", "flash3-fp8", "fp8-flash3-fp8")


def fresh_pipeline(pipe: Any, weights: dict[str, torch.Tensor], smoke: bool, device: str) -> Any:
    """A pipeline sharing `pipe`'s text encoder, VAE, tokenizer and scheduler, with a transformer of its own loaded
    with `weights` (the plain transformer's, as built)."""
    from diffusers import WanPipeline, WanTransformer3DModel

    with torch.device(device):
        transformer = WanTransformer3DModel(**(TINY_TRANSFORMER if smoke else WAN_1_3B)).to(pipe.transformer.dtype)
    transformer.load_state_dict(weights)
    fresh = WanPipeline(
        tokenizer=pipe.tokenizer,
        text_encoder=pipe.text_encoder,
        transformer=transformer,
        vae=pipe.vae,
        scheduler=pipe.scheduler,
    )
    fresh.set_progress_bar_config(disable=True)
    return fresh


def compiled_plain(
    pipe: Any, args: argparse.Namespace, tiers: list[str], repeats: dict[str, int], report: dict[str, Any]
) -> None:
    """The plain call with its transformer compiled whole (`torch.compile(pipe.transformer)`, inductor's defaults):
    compiled by a short call at each tier's shape, then timed; the eager transformer put back after."""
    eager = pipe.transformer
    pipe.transformer = torch.compile(eager)
    started = time.perf_counter()
    for tier in tiers:
        plain_call(pipe, args, tier, 0, steps=args.plain_warmup_steps)
    report["compiled_plain_warmup_s"] = round(time.perf_counter() - started, 1)
    for tier in tiers:
        row = report["latency"][tier]
        times = [plain_call(pipe, args, tier, 1000 + i)[0] for i in range(repeats[tier])]
        row["compiled_plain_s"] = [round(t, 3) for t in times]
        row["compiled_plain_median_s"] = statistics.median(times)
        row["compiled_of_plain"] = round(row["compiled_plain_median_s"] / row["plain_median_s"], 3)
        print(f"compiled plain {tier}: {times} (compile {report['compiled_plain_warmup_s']} s)", flush=True)
    pipe.transformer = eager
    torch.compiler.reset()


def request_breakdown(
    generator: VideoGenerator,
    pipe: Any,
    args: argparse.Namespace,
    tier: str,
    latency_s: float,
    stages: dict[str, float],
    frames: np.ndarray,
    peak_tflops: float,
) -> dict[str, Any]:
    """The engine's exact request at `tier` in parts (benchmarks/harness/breakdown.py)."""
    width, height = TIERS[tier]
    config = pipe.transformer.config
    tokens = breakdown.video_tokens(config, width, height, args.frames)
    batch = 2 if args.guidance > 1 else 1
    return breakdown.request_breakdown(
        latency_s,
        stages,
        text_s=breakdown.text_encoder_s(pipe, "a red circle moving left, parts", args.device),
        attention_forward_s=breakdown.attention_per_forward_s(
            config, tokens, batch, generator.gpu.attention_kernel, args.device
        ),
        forwards=args.steps,
        encode_s=breakdown.mp4_encode_s(frames),
        flops=breakdown.forward_flops(config, tokens, batch),
        peak_flops=peak_tflops * 1e12,
    ) | {"tokens": tokens, "attention_kernel": generator.gpu.attention_kernel}


def measure_latency(
    generator: VideoGenerator,
    pipe: Any,
    args: argparse.Namespace,
    quantization: str,
    policy_names: list[str],
    repeats: dict[str, int],
    reference: str,
    references: dict[tuple[str, int], np.ndarray],
    report: dict[str, Any],
) -> None:
    """One engine variant's latency rows at each tier of `repeats`, under each of its step policies, with each
    row's fidelity against the frames of `reference` (kept in `references` when this is the reference)."""
    for tier in repeats:
        row = report["latency"][tier]
        for policy_name in policy_names:
            name = f"{quantization} {policy_name}"
            times, quality = [], []
            stages = []
            for i in range(repeats[tier]):
                seconds, output = engine_generate(generator, args, tier, 1000 + i, POLICIES[policy_name])
                frames = output.frames
                times.append(seconds)
                stages.append({k: round(v, 3) for k, v in output.stage_durations.items()})
                if name == reference:
                    references[(tier, i)] = frames
                else:
                    quality.append(fidelity(frames, references[(tier, i)]))
            median = statistics.median(times)
            row[name] = {
                "latency_s": [round(t, 3) for t in times],
                "median_s": round(median, 3),
                "of_plain": round(median / row["plain_median_s"], 3),
                "of_compiled_plain": round(median / row["compiled_plain_median_s"], 3)
                if "compiled_plain_median_s" in row
                else None,
                "stages_s": stages,
                "transformer_steps": POLICIES[policy_name].computed_count(args.steps),
                "fidelity_vs_exact": quality,
            }
            print(f"{tier} {name}: {row[name]}", flush=True)
            save(args, report)
            if args.breakdown and policy_name == "exact" and quantization in BROKEN_DOWN:
                row[f"{name} breakdown"] = request_breakdown(
                    generator, pipe, args, tier, median, stages[0], frames, report["env"]["bf16_matmul_burst_tflops"]
                )
                print(f"{tier} {name} breakdown: {row[f'{name} breakdown']}", flush=True)
                save(args, report)


def save(args: argparse.Namespace, report: dict[str, Any]) -> None:
    (args.out / "levers_gpu.json").write_text(json.dumps(report, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, 4 steps: checks the script only")
    parser.add_argument("--tiers", default="480p", help="latency tiers ('' for none)")
    parser.add_argument("--throughput-tier", default="", help="the closed-loop tier ('' for none), e.g. 256p")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=3)
    parser.add_argument("--serial-repeats", type=int, default=5, help="plain calls one after another (throughput)")
    parser.add_argument("--frames", type=int, default=189, help="Cosmos 3's clip length by default")
    parser.add_argument("--plain-warmup-steps", type=int, default=2, help="steps of the plain call's warm-up")
    parser.add_argument(
        "--compiled-plain", action=argparse.BooleanOptionalAction, default=True, help="the compiled plain call too"
    )
    parser.add_argument(
        "--breakdown", action=argparse.BooleanOptionalAction, default=None, help="the request in parts (GPU only)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=5.0)
    parser.add_argument("--repeats", default="480p=1,720p=1", help="timed requests per tier and variant")
    parser.add_argument("--quantizations", default="bf16,fp8")
    parser.add_argument("--policies", default="exact,taylor/3")
    parser.add_argument("--bf16-policies", default=None, help="the bf16 engine's policies (default: --policies)")
    parser.add_argument(
        "--policies-of",
        action="append",
        default=[],
        metavar="VARIANT=POLICIES",
        help="one variant's policies instead of --policies, e.g. flash3=exact (may be repeated)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.frames = 4, 5
    if args.breakdown is None:
        args.breakdown = not args.smoke
    tiers = [tier for tier in args.tiers.split(",") if tier]
    repeats = {tier: 1 for tier in tiers} | {
        part.split("=")[0]: int(part.split("=")[1]) for part in args.repeats.split(",") if "=" in part
    }
    quantizations = args.quantizations.split(",")
    policies = args.policies.split(",")
    bf16_policies = (args.bf16_policies or args.policies).split(",")
    policies_of = {"bf16": bf16_policies} | {
        variant: chosen.split(",") for variant, _, chosen in (item.partition("=") for item in args.policies_of)
    }
    reference = f"{quantizations[0]} exact"  # whose frames the others' fidelity is measured against
    if quantizations[0] not in EXACT_VARIANTS or policies_of.get(quantizations[0], policies)[0] != "exact":
        parser.error(
            f"the first quantization must be exact ({' or '.join(EXACT_VARIANTS)}) and its first policy exact: "
            "they are the reference"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "latency": {}, "throughput": {}}

    pipe, _ = build_pipeline(args.device, args.smoke)
    weights = {name: value.detach().clone().cpu() for name, value in pipe.transformer.state_dict().items()}
    report["env"] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
    }
    # The plain call first: the engine's set-up changes the modules it is given.
    first_tier = (tiers or [args.throughput_tier])[0]
    # Two ceilings: a burst from an idle card (the clocks a step's short products run at) and the rate held under
    # a second of products (a card at its power limit clocks down; the transformer runs between the two).
    report["env"]["bf16_matmul_burst_tflops"] = round(matmul_rate_burst(args.device) / 1e12, 1)
    report["env"]["bf16_matmul_tflops"] = round(matmul_rate(args.device) / 1e12, 1)
    plain_call(pipe, args, first_tier, 0, steps=args.plain_warmup_steps)  # warm-up
    for tier in tiers:
        times = [plain_call(pipe, args, tier, 1000 + i)[0] for i in range(repeats[tier])]
        report["latency"][tier] = {"plain_s": [round(t, 3) for t in times], "plain_median_s": statistics.median(times)}
        print(f"plain {tier}: {times}", flush=True)
        save(args, report)
    if tiers and args.compiled_plain:
        compiled_plain(pipe, args, tiers, repeats, report)
        save(args, report)
    if args.throughput_tier:
        tier = args.throughput_tier
        plain_call(pipe, args, tier, 0)
        started = time.perf_counter()
        for i in range(args.serial_repeats):
            plain_call(pipe, args, tier, 1000 + i)
        serial = (time.perf_counter() - started) / args.serial_repeats
        report["throughput"] = {"tier": tier, "plain_serial_s_per_video": round(serial, 4)}
        print(f"plain {tier} serial: {serial:.3f} s a video", flush=True)
        save(args, report)

    references: dict[tuple[str, int], np.ndarray] = {}  # (tier, seed) -> the exact bf16 engine's frames
    for quantization in quantizations:
        variant = QUANTIZATIONS[quantization]
        # Each variant compiles afresh: compiled blocks are shared by every module of the same structure, so a
        # variant that changes only how the compiler writes its kernels would otherwise run the last one's.
        torch.compiler.reset()
        target = pipe if quantization == "bf16" else fresh_pipeline(pipe, weights, args.smoke, args.device)
        generator = VideoGenerator(
            "wan2.1-t2v-1.3b-random",
            device=args.device,
            quantization=variant.quantization,
            attention_backend=variant.attention,
            fp8_options=variant.fp8_options,
        )
        # The blocks compile on the generator's device thread, with the heuristics set there (reset for each
        # variant: an older torch keeps the setting for the whole process).
        generator.on_device_thread(use_row_limit, variant.row_limit)
        # Read by the GELU kernel's launches as the warm-up captures them: this variant's, until the next one's.
        fp8.GELU_CHUNK = variant.gelu_chunk
        try:
            generator.load(pipeline=target)
        except ModelLoadError as exc:  # the others still run: the report says why this one did not
            report.setdefault("refused", {})[quantization] = str(exc)
            print(f"{quantization}: refused: {exc}", flush=True)
            save(args, report)
            continue
        started = time.perf_counter()
        if tiers:
            generator.warmup([(*TIERS[tier], args.frames) for tier in tiers], max_batch=1)
        if args.throughput_tier:
            generator.warmup([(*TIERS[args.throughput_tier], args.frames)], max_batch=args.concurrency)
        warmup_s = round(time.perf_counter() - started, 1)
        report.setdefault("warmup_s", {})[quantization] = warmup_s
        report.setdefault("fp8_forward_difference", {})[quantization] = generator.gpu.fp8_difference
        installed = generator.gpu.fp8
        report.setdefault("gelu_kernel_in_force", {})[quantization] = installed.gelu_fused if installed else None
        report.setdefault("graphs_in_force", {})[quantization] = bool(
            generator.gpu.graphs and generator.gpu.graphs.enabled
        )
        print(f"{quantization}: warm-up {warmup_s} s, levers {generator.levers}", flush=True)
        try:
            measure_latency(
                generator,
                pipe,
                args,
                quantization,
                policies_of.get(quantization, policies),
                {tier: repeats[tier] for tier in tiers},
                reference,
                references,
                report,
            )
        except Exception as exc:  # a kernel that fails at run time: the others' figures still come
            report.setdefault("failed", {})[quantization] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"{quantization}: failed: {traceback.format_exc()}", flush=True)
            save(args, report)
            generator.close()  # its pipeline's memory goes back for the next variant
            del generator, target
            if args.device == "cuda":
                torch.cuda.empty_cache()
            continue
        if args.throughput_tier:
            manager = JobManager(
                generator,
                Path(tempfile.mkdtemp(prefix="levers-")),
                "wan2.1-t2v-1.3b-random",
                EngineMetrics("wan2.1-t2v-1.3b-random"),
                max_batch=args.concurrency,
                batch_wait_ms=200.0,
                encode_workers=8 if args.device == "cuda" else 0,
            )
            manager.start()
            for policy_name in policies:
                name = f"{quantization} {policy_name}"
                policy = POLICIES[policy_name]
                figures = run_engine_closed_loop(
                    manager, args, args.throughput_tier, args.concurrency, args.per_client, policy
                )
                _, job = submit_and_wait(manager, engine_params(args, args.throughput_tier, 1, policy))
                figures["record_levers"] = job.record().levers  # what its sidecar says it was made with
                serial = report["throughput"]["plain_serial_s_per_video"]
                figures["times_plain_serial"] = round(figures["throughput_videos_per_s"] * serial, 3)
                _, frames = engine_call(generator, args, args.throughput_tier, 1000, POLICIES[policy_name])
                if name == reference:
                    references[(args.throughput_tier, -1)] = frames
                else:
                    figures["fidelity_vs_exact"] = [fidelity(frames, references[(args.throughput_tier, -1)])]
                report["throughput"][name] = figures
                print(f"{args.throughput_tier} c{args.concurrency} {name}: {figures}", flush=True)
                save(args, report)
            manager.shutdown()
        generator.close()
        del generator, target
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print_table(report, args)
    return 0


def _shown(quality: list[dict[str, float]]) -> str:
    return "; ".join(f"{q['mean_levels']:.2f} / {q['max_levels']}, {q['psnr_db']:.1f} dB" for q in quality)


def print_table(report: dict[str, Any], args: argparse.Namespace) -> None:
    if report["latency"]:
        print(
            "\n| tier | what | latency (s) | of the plain call | transformer steps | vs exact: mean / max levels, PSNR |"
        )
        print("|---|---|---|---|---|---|")
    for tier, row in report["latency"].items():
        print(f"| {tier} | plain call | {row['plain_median_s']:.2f} | 1.00 | {args.steps} | |")
        if "compiled_plain_median_s" in row:
            print(
                f"| {tier} | plain call, compiled | {row['compiled_plain_median_s']:.2f} | {row['compiled_of_plain']:.3f} "
                f"| {args.steps} | |"
            )
        for name, figures in row.items():
            if isinstance(figures, dict) and "median_s" in figures:
                compiled = figures.get("of_compiled_plain")
                print(
                    f"| {tier} | engine, {name} | {figures['median_s']:.2f} | {figures['of_plain']:.3f}"
                    f"{f' ({compiled:.3f} of compiled)' if compiled else ''} | "
                    f"{figures['transformer_steps']} | {_shown(figures['fidelity_vs_exact'])} |"
                )
        for name, parts in row.items():
            if name.endswith("breakdown"):
                print(f"\n{tier} {name}: shares {parts['share']}; transformer {parts['transformer_tflops']} TFLOP/s")
                print(
                    f"  = {parts['transformer_of_peak']:.3f} of the bf16 products' burst rate ({parts['peak_tflops']} "
                    f"TFLOP/s; held for a second: {report['env']['bf16_matmul_tflops']})"
                )
    throughput = report["throughput"]
    if throughput:
        print(
            f"\n| {throughput['tier']}, c{args.concurrency} | videos/s | × the plain serial call | p50 (s) | batches | vs exact |"
        )
        print("|---|---|---|---|---|---|")
        print(f"| plain call, serial | {1 / throughput['plain_serial_s_per_video']:.3f} | 1.00 | | | |")
        for name, figures in throughput.items():
            if isinstance(figures, dict):
                print(
                    f"| engine, {name} | {figures['throughput_videos_per_s']:.3f} | {figures['times_plain_serial']:.2f} | "
                    f"{figures['latency_p50_s']:.2f} | {statistics.median(figures['batch_sizes'] or [0])} | "
                    f"{_shown(figures.get('fidelity_vs_exact', []))} |"
                )


if __name__ == "__main__":
    raise SystemExit(main())
