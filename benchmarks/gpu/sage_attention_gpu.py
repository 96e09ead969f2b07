"""SageAttention 2's CUDA kernels for Hopper (int8 q·k, fp8 p·v, `sageattn_qk_int8_pv_fp8_cuda_sm90`) against the
attention the embedded engine runs (cuDNN's, through SDPA, on (B, N, H, D) views), at Wan2.1-1.3B's shapes.

SageAttention is not on the package index for this GPU's CUDA: the script builds the two extensions that kernel
needs (`_qattn_sm90`, `_fused`) from a SageAttention source tree, with torch's extension builder and the machine's
nvcc, for sm_90a; both build at once, each in its own process. The built modules are copied to DIR/sage-so, so that
a later run can take them with --prebuilt instead of building again.

Sage's times include its own quantization of q, k and v (and v's padding to a multiple of 128 tokens): what a
call costs the engine. Each kernel gets the same random q, k, v (bf16, the guidance pair: B=2, 12 heads x 128),
several sets in turn so the inputs come from memory; the time is the median of triton.testing.do_bench. Error:
against float32 attention on the first two heads, ||out - ref|| / ||ref||. The kernels are built with their launches
on torch's current stream (as released they go to the default stream, which CUDA graphs do not capture), so the
built package serves the engine's `--attention-backend sage` too: put /tmp/sage-package, where it is left, on
PYTHONPATH.

Usage (on an H100/H200, with a checkout of github.com/thu-ml/SageAttention at SRC):
    python benchmarks/gpu/sage_attention_gpu.py --source SRC --out DIR [--prebuilt DIR/sage-so] [--tiers 480p,720p]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

# tokens of one sample at 16:9, 33 frames (Wan's VAE: 8x spatial, 4x temporal; patch 2x2)
TOKENS = {"256p": 2160, "480p": 14040, "720p": 32400}
BATCH, HEADS, HEAD_DIM = 2, 12, 128
INPUT_SETS = 3
MODULES = {
    "_qattn_sm90": (["csrc/qattn/pybind_sm90.cpp", "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu"], ["-lcuda"]),
    "_fused": (["csrc/fused/pybind.cpp", "csrc/fused/fused.cu"], []),
}
CXX_FLAGS = ["-O3", "-std=c++17", "-DENABLE_BF16", "-fopenmp"]
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--use_fast_math",
    "--threads=8",
    "-diag-suppress=174",
    "-gencode",
    "arch=compute_90a,code=sm_90a",
]


# The attention extension instantiates its kernel for every head size, causal mode, lse return and output dtype (32
# variants per entry point, minutes of nvcc each); the engine calls one: head_dim 128, not causal, no lse, bf16.
NARROWED = {"head_dim": "64", "is_causal": "1", "return_lse": "1", "pytorch_dtype": "at::ScalarType::Half"}


def narrowed_dispatch(header: str, dropped: dict[str, str] = NARROWED) -> str:
    """dispatch_utils.h without the first-branch cases in `dropped` (variable -> value): each such macro's
    `if (var == value) {...} else if (...)` becomes `if (...)`."""
    lines = header.splitlines(keepends=True)
    out: list[str] = []
    skipping = False
    for line in lines:
        stripped = line.strip()
        opening = next((v for v, value in dropped.items() if stripped.startswith(f"if ({v} == {value})")), None)
        if opening is not None:
            skipping = True
            continue
        if skipping and stripped.startswith("} else if"):
            out.append(line.replace("} else if", "if", 1))
            skipping = False
            continue
        if not skipping:
            out.append(line)
    return "".join(out)


LAUNCH = re.compile(r"<<<([^<>]*?)>>>")


def on_current_stream(code: str) -> str:
    """CUDA source whose kernel launches go to torch's current stream. SageAttention launches its kernels on the
    default stream: run eagerly they are correct (that stream waits for the others), but a CUDA graph captured
    on a side stream leaves them out, and the engine's check of its graphs then finds a different result and
    serves without graphs. On the current stream they are captured like any other kernel."""

    def launch(match: re.Match) -> str:
        parts = [part.strip() for part in match.group(1).split(",")]
        if len(parts) >= 4:
            return match.group(0)
        parts += ["0"] * (3 - len(parts))
        return "<<<" + ", ".join([*parts, "at::cuda::getCurrentCUDAStream()"]) + ">>>"

    patched = LAUNCH.sub(launch, code)
    if patched != code and "ATen/cuda/CUDAContext.h" not in patched:
        patched = "#include <ATen/cuda/CUDAContext.h>\n" + patched
    return patched


def patched_source(source: Path, narrow: bool) -> Path:
    """A copy of the source tree with its kernels launched on the current stream and, if `narrow`, the attention
    kernels instantiated for the engine's case alone."""
    copy = Path("/tmp/sage-patched")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source / "csrc", copy / "csrc")
    for cuda in (copy / "csrc").rglob("*.cu"):
        cuda.write_text(on_current_stream(cuda.read_text()))
    if narrow:
        header = copy / "csrc" / "dispatch_utils.h"
        header.write_text(narrowed_dispatch(header.read_text()))
    return copy


def build_one(source: Path, name: str, build_dir: Path) -> Path:
    """Build one extension with torch's builder; the path of its shared object."""
    from torch.utils.cpp_extension import load

    sources, ldflags = MODULES[name]
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    build_dir.mkdir(parents=True, exist_ok=True)
    load(
        name=name,
        sources=[str(source / s) for s in sources],
        extra_cflags=[*CXX_FLAGS, abi],
        extra_cuda_cflags=[*NVCC_FLAGS, abi],
        extra_ldflags=ldflags,
        extra_include_paths=[str(source / "csrc")],
        build_directory=str(build_dir),
        verbose=True,
    )
    return next(build_dir.glob(f"{name}*.so"))


def package(source: Path, out: Path, prebuilt: Path | None, narrow: bool = True) -> tuple[Path, dict[str, Any]]:
    """A copy of the `sageattention` package with the two built modules in it; the folder that holds it and what
    the build took."""
    root = Path("/tmp/sage-package")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(source / "sageattention", root / "sageattention")
    info: dict[str, Any] = {}
    kept = out / "sage-so"
    kept.mkdir(parents=True, exist_ok=True)
    if prebuilt is not None:
        for name in MODULES:
            shutil.copy(next(prebuilt.glob(f"{name}*.so")), root / "sageattention" / f"{name}.so")
        info["built"] = f"prebuilt, from {prebuilt}"
        return root, info
    started = time.perf_counter()
    patched = patched_source(source, narrow)
    info["instantiated"] = "head_dim 128, not causal, no lse, bf16 out" if narrow else "all"
    info["launches"] = "on the current stream"
    workers = {
        name: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--build-one",
                name,
                "--source",
                str(patched),
                "--out",
                str(out),
            ],
            stdout=(out / f"build-{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "MAX_JOBS": "8"},
        )
        for name in MODULES
    }
    for name, worker in workers.items():
        if worker.wait() != 0:
            tail = (out / f"build-{name}.log").read_text()[-3000:]
            raise SystemExit(f"building {name} failed:\n{tail}")
        built = next((out / "build" / name).glob(f"{name}*.so"))
        shutil.copy(built, root / "sageattention" / f"{name}.so")
        shutil.copy(built, kept / f"{name}.so")
    info["build_s"] = round(time.perf_counter() - started, 1)
    print(f"built in {info['build_s']} s; the package: {root} (on PYTHONPATH, the engine can take it)", flush=True)
    return root, info


def timed(function, inputs: list[tuple[torch.Tensor, ...]]) -> float:
    import triton.testing

    turn = iter(range(10**9))
    return float(
        triton.testing.do_bench(
            lambda: function(*inputs[next(turn) % len(inputs)]), warmup=50, rep=400, return_mode="median"
        )
    )


def cudnn_bnhd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """As the engine runs it: SDPA's cuDNN kernel on (B, H, N, D) views of (B, N, H, D) tensors."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """float32 attention of the first two heads, (B, N, 2, D)."""
    q, k, v = (t[:, :, :2].transpose(1, 2).float() for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    got = out[:, :, :2].float()
    return float((got - ref).norm() / ref.norm())


def main(args: argparse.Namespace) -> int:
    if args.build_one:
        build_one(args.source, args.build_one, args.out / "build" / args.build_one)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    report["nvcc"] = nvcc[-1] if nvcc else None
    root, report["build"] = package(args.source, args.out, args.prebuilt, narrow=not args.all_variants)
    sys.path.insert(0, str(root))
    import sageattention

    kernels = {
        "cudnn (the engine's)": cudnn_bnhd,
        "sage2 sm90 (per-thread q·k scales, k smoothed)": lambda q, k, v: (
            sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="NHD")
        ),
        "sage2 sm90, per-warp scales": lambda q, k, v: sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(
            q, k, v, tensor_layout="NHD", qk_quant_gran="per_warp"
        ),
        "sage2 sm90, k not smoothed": lambda q, k, v: sageattention.sageattn_qk_int8_pv_fp8_cuda_sm90(
            q, k, v, tensor_layout="NHD", smooth_k=False
        ),
        "sage triton (int8 q·k, fp16 p·v)": lambda q, k, v: sageattention.sageattn_qk_int8_pv_fp16_triton(
            q, k, v, tensor_layout="NHD"
        ),
    }
    rows = []
    for tier in [t for t in args.tiers.split(",") if t]:  # none: build the package only
        tokens = TOKENS[tier]
        inputs = [
            tuple(torch.randn(BATCH, tokens, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for _ in range(INPUT_SETS)
        ]
        ref = reference(*inputs[0])
        flops = 4 * BATCH * HEADS * tokens * tokens * HEAD_DIM
        base = None
        for name, kernel in kernels.items():
            try:
                err = error(kernel(*inputs[0]), ref)
                ms = timed(kernel, inputs)
            except Exception as exc:  # one kernel that does not run here still leaves the others' figures
                rows.append({"tier": tier, "kernel": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
                print(json.dumps(rows[-1]), flush=True)
                continue
            base = base or ms
            rows.append(
                {
                    "tier": tier,
                    "tokens": tokens,
                    "kernel": name,
                    "ms": round(ms, 3),
                    "tflops": round(flops / ms / 1e9, 1),
                    "of_cudnn": round(ms / base, 3),
                    "relative_error": round(err, 5),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        del inputs, ref
        torch.cuda.empty_cache()
    report["rows"] = rows
    (args.out / "sage_attention.json").write_text(json.dumps(report, indent=2))
    print(f"\n{report['device']}, {report['nvcc']}, build: {report['build']}")
    print("| tier | kernel | time | TFLOP/s | of cuDNN | rel. error vs fp32 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "ms" in r:
            print(
                f"| {r['tier']} | {r['kernel']} | {r['ms']:.2f} ms | {r['tflops']:.0f} | {r['of_cudnn']:.2f} "
                f"| {r['relative_error']:.2%} |"
            )
        else:
            print(f"| {r['tier']} | {r['kernel']} | failed: {r['error'][:80]} | | | |")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True, help="a SageAttention source tree")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--prebuilt", type=Path, default=None, help="a folder of built _qattn_sm90 and _fused .so")
    parser.add_argument("--tiers", default="480p,720p")
    parser.add_argument("--all-variants", action="store_true", help="build every kernel variant (much longer)")
    parser.add_argument("--build-one", default=None, help=argparse.SUPPRESS)
    raise SystemExit(main(parser.parse_args()))
