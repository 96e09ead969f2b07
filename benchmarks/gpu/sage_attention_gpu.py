"""Attention kernels at the engine's shapes on Hopper: cuDNN (what the engine and diffusers run, through SDPA, on
(B, N, H, D) views), SDPA's flash and memory-efficient kernels, FlashAttention 3's exact Hopper forward
(`--attention-backend flash3`) and its fp8 forward (`flash3-fp8`), and SageAttention (int8 q·k): its Hopper CUDA kernel (`sageattn_qk_int8_pv_fp8_cuda_sm90`)
and its Triton kernel (what the package index's sageattention 1.0.6 runs).

The Hopper kernels come from the engine's own builders, as a first start gets them (studio.engine.gpu.sage_build,
studio.engine.gpu.flash3_build): from the source trees --source and --flash3-source name (else the pinned commits,
fetched), cached; the report says whether they were built in this run and in how long.

Sage's times include its own quantization of q, k and v (and v's padding to a multiple of 128 tokens), and FlashAttention
3's fp8 row the engine's (studio.engine.gpu.flash3.fp8_attention_inputs, eager inside the engine's attention op): what
a call costs the engine. Beside it, the same quantization through torch.compile, and the fp8 kernel alone on inputs
already in fp8, which says what the quantization costs. Each kernel gets the same random q, k, v (bf16, the guidance pair: B=2, 12 heads x 128), several
sets in turn so the inputs come from memory; the time is the median of triton.testing.do_bench. Error: against
float32 attention on the first two heads, ||out - ref|| / ||ref||.

Usage (on an H100/H200):
    python benchmarks/gpu/sage_attention_gpu.py --source SRC --flash3-source FA_SRC --out DIR [--shapes 480p:189,720p:93]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from studio.engine.gpu import flash3_build, kernel_build, sage_build
from studio.engine.gpu.flash3 import (
    flash3_attention_bnhd,
    flash3_fp8_attention_bnhd,
    flash3_fp8_kernel,
    fp8_attention_inputs,
)

SIZES = {"256p": (320, 192), "480p": (832, 480), "720p": (1280, 720)}  # 16:9 (width, height)
BATCH, HEADS, HEAD_DIM = 2, 12, 128
INPUT_SETS = 3


def tokens(tier: str, frames: int) -> int:
    """One sample's tokens: Wan's VAE (8x spatial, 4x temporal), patches of 2x2."""
    width, height = SIZES[tier]
    return ((frames - 1) // 4 + 1) * (height // 16) * (width // 16)


def built_package(builder: Any, source: Path | None) -> dict[str, Any]:
    """The engine's Hopper build of SageAttention or FlashAttention 3 (`builder`: its module), found in its cache or
    built now; what it took, or why it could not be."""
    if source is not None:
        os.environ[builder.SOURCE_ENV] = str(source)
    started = time.perf_counter()
    try:
        entry = builder.hopper_package()
    except kernel_build.KernelBuildError as exc:  # the other kernels are still timed
        return {"error": str(exc)}
    builder.activate(entry)
    info = {"entry": str(entry), "seconds": round(time.perf_counter() - started, 1)}
    info.update(json.loads((entry / kernel_build.MARKER).read_text()))
    return info


def timed(function, inputs: list[tuple[torch.Tensor, ...]]) -> float:
    import triton.testing

    turn = iter(range(10**9))
    return float(
        triton.testing.do_bench(
            lambda: function(*inputs[next(turn) % len(inputs)]), warmup=50, rep=400, return_mode="median"
        )
    )


def sdpa_bnhd(kernel: str):
    """As the engine runs SDPA: `kernel` on (B, H, N, D) views of (B, N, H, D) tensors."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}.get(
        kernel, SDPBackend.EFFICIENT_ATTENTION
    )

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(backend):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
        return out.transpose(1, 2)

    return run


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """float32 attention of the first two heads, (B, N, 2, D)."""
    q, k, v = (t[:, :, :2].transpose(1, 2).float() for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    got = out[:, :, :2].float()
    return float((got - ref).norm() / ref.norm())


def main(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    report["nvcc"] = nvcc[-1] if nvcc else None
    report["flash3_build"] = built_package(flash3_build, args.flash3_source)
    print(f"FlashAttention 3's Hopper kernel: {report['flash3_build']}", flush=True)
    kernels = {
        "cudnn (the engine's)": sdpa_bnhd("cudnn"),
        "sdpa flash": sdpa_bnhd("flash"),
        "sdpa efficient": sdpa_bnhd("efficient"),
        "flash attention 3 (exact; the engine's flash3)": flash3_attention_bnhd,
    }
    report["build"] = built_package(sage_build, args.source) if args.sage else None
    if args.sage:
        print(f"SageAttention's Hopper kernels: {report['build']}", flush=True)
        import sageattention

        kernels |= {
            "sage2 sm90, per-warp scales (the engine's sage)": lambda q, k, v: (
                sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="NHD", qk_quant_gran="per_warp")
            ),
            "sage2 sm90, per-thread scales": lambda q, k, v: sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(
                q, k, v, tensor_layout="NHD"
            ),
            "sage triton (int8 q·k, fp16 p·v; the index's 1.0.6)": lambda q, k, v: (
                sageattention.sageattn_qk_int8_pv_fp16_triton(q, k, v, tensor_layout="NHD")
            ),
        }
    quantized: dict[int, tuple[torch.Tensor, ...]] = {}  # each input set in fp8, by its q's id

    def fp8_kernel_alone(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash3_fp8_kernel(*quantized[id(q)])

    compiled_inputs = torch.compile(fp8_attention_inputs)

    def fp8_compiled_quantization(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash3_fp8_kernel(*compiled_inputs(q, k, v))

    kernels |= {
        "flash attention 3 fp8, per-head scales (the engine's flash3-fp8)": flash3_fp8_attention_bnhd,
        "flash attention 3 fp8, its quantization through torch.compile": fp8_compiled_quantization,
        "flash attention 3 fp8, the kernel alone (inputs in fp8)": fp8_kernel_alone,
    }
    rows = []
    for shape in [s for s in args.shapes.split(",") if s]:  # none: build the package only
        tier, frames = shape.split(":")
        count = tokens(tier, int(frames))
        inputs = [
            tuple(torch.randn(BATCH, count, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for _ in range(INPUT_SETS)
        ]
        quantized.clear()
        quantized.update({id(q): fp8_attention_inputs(q, k, v) for q, k, v in inputs})
        ref = reference(*inputs[0])
        flops = 4 * BATCH * HEADS * count * count * HEAD_DIM
        base = None
        for name, kernel in kernels.items():
            try:
                err = error(kernel(*inputs[0]), ref)
                ms = timed(kernel, inputs)
            except Exception as exc:  # one kernel that does not run here still leaves the others' figures
                rows.append({"shape": shape, "kernel": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
                print(json.dumps(rows[-1]), flush=True)
                continue
            base = base or ms
            rows.append(
                {
                    "shape": shape,
                    "tokens": count,
                    "kernel": name,
                    "ms": round(ms, 3),
                    "tflops": round(flops / ms / 1e9, 1),
                    "of_cudnn": round(ms / base, 3),
                    "relative_error": round(err, 5),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            report["rows"] = rows
            (args.out / "sage_attention.json").write_text(json.dumps(report, indent=2))
        del inputs, ref
        quantized.clear()
        torch.cuda.empty_cache()
    report["rows"] = rows
    (args.out / "sage_attention.json").write_text(json.dumps(report, indent=2))
    print(f"\n{report['device']}, {report['nvcc']}, build: {report['build']}")
    print("| shape | tokens | kernel | time | TFLOP/s | of cuDNN | rel. error vs fp32 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "ms" in r:
            print(
                f"| {r['shape']} | {r['tokens']} | {r['kernel']} | {r['ms']:.2f} ms | {r['tflops']:.0f} | "
                f"{r['of_cudnn']:.2f} | {r['relative_error']:.2%} |"
            )
        else:
            print(f"| {r['shape']} | | {r['kernel']} | failed: {r['error'][:80]} | | | |")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=None, help="a SageAttention source tree (else the pinned one)")
    parser.add_argument(
        "--flash3-source", type=Path, default=None, help="a flash-attention checkout with csrc/cutlass (else pinned)"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--shapes", default="480p:189,720p:93", help="TIER:FRAMES,... ('' builds only)")
    parser.add_argument(
        "--sage", action=argparse.BooleanOptionalAction, default=True, help="SageAttention's kernels too (built first)"
    )
    raise SystemExit(main(parser.parse_args()))
