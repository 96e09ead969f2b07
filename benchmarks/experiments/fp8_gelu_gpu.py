"""The feed-forward's GELU, row maximum and e4m3 cast between its two fp8 products, three ways, in one run on a GPU:

- `torch-gelu`: GELU then `quantize_rows` as torch ops, compiled by inductor (what fp8 did before the kernel: its
  reduction kernel reads each 8,960-wide row twice and computes the GELU twice);
- `kernel`: the engine's Triton kernel (`studio.engine.gpu.fp8.gelu_quantize_rows`) as the engine launches it, in
  two passes over chunks of each row (fp8.GELU_CHUNK columns; the second pass finds the row in L2);
- `one-pass`: the same kernel with the whole row in registers at once (what the engine ran on 2026-12-03), and
  `chunk-N`: two passes of N columns, for the choice of GELU_CHUNK;
- `copy`: a bf16 read and an fp8 write of the same rows with no arithmetic, the memory's floor for the pass.

Rows are the tokens of the guidance pair at Wan2.1-1.3B's shapes (16:9, 33 frames): 480p 2 x 14,040, 720p
2 x 32,400; each time is the median of triton.testing.do_bench over several input sets (so the rows come from
memory, not the cache). The kernel's check against the torch version (`gelu_kernel_problem`) runs first.

Usage (on a CUDA GPU):
    python benchmarks/experiments/fp8_gelu_gpu.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from studio.engine.gpu import fp8

SHAPES = {"480p": 2 * 14040, "720p": 2 * 32400}
WIDTH = 8960
INPUT_SETS = 4
CHUNKS = (512, 1024, 2048, 4096)


def torch_gelu(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return fp8.quantize_rows(torch.nn.functional.gelu(x, approximate="tanh"))


def copy_floor(x: torch.Tensor) -> torch.Tensor:
    return x.to(fp8.FP8_DTYPE)


def with_chunk(chunk: int):
    """The engine's kernel launched with `chunk` columns a pass (0: the whole row at once)."""

    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        quantized = torch.empty(x.shape, dtype=fp8.FP8_DTYPE, device=x.device)
        scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
        fp8._gelu_quantize_into(x, quantized, scale, chunk)
        return quantized, scale

    return run


def timed(function, inputs: list[torch.Tensor]) -> float:
    import triton.testing

    turn = iter(range(10**9))
    return float(
        triton.testing.do_bench(
            lambda: function(inputs[next(turn) % len(inputs)]), warmup=50, rep=300, return_mode="median"
        )
    )


def main(args: argparse.Namespace) -> int:
    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "width": WIDTH}
    report["kernel_check"] = fp8.gelu_kernel_problem("cuda", WIDTH) or "matches the torch version"
    print("kernel check:", report["kernel_check"], flush=True)
    compiled = torch.compile(torch_gelu, dynamic=False)
    compiled_copy = torch.compile(copy_floor, dynamic=False)
    rows_out = []
    for tier, rows in SHAPES.items():
        inputs = [(torch.randn(rows, WIDTH, device="cuda") * 2).to(torch.bfloat16) for _ in range(INPUT_SETS)]
        q_kernel, s_kernel = fp8.gelu_quantize_rows(inputs[0])
        q_torch, s_torch = compiled(inputs[0])
        exact = torch.nn.functional.gelu(inputs[0].float(), approximate="tanh")
        times = {
            "torch-gelu": timed(compiled, inputs),
            "kernel": timed(fp8.gelu_quantize_rows, inputs),
            "one-pass": timed(with_chunk(0), inputs),
            **{f"chunk-{chunk}": timed(with_chunk(chunk), inputs) for chunk in CHUNKS},
            "copy": timed(compiled_copy, inputs),
        }
        one_pass = with_chunk(0)(inputs[0])
        chunked = fp8.gelu_quantize_rows(inputs[0])
        same = bool(
            torch.equal(one_pass[1], chunked[1])
            and torch.equal(one_pass[0].view(torch.uint8), chunked[0].view(torch.uint8))
        )
        moved = rows * WIDTH * 3  # bytes: bf16 in, e4m3 out
        row = {
            "tier": tier,
            "rows": rows,
            **{f"{name}_ms": round(ms, 4) for name, ms in times.items()},
            "kernel_gb_per_s": round(moved / times["kernel"] / 1e6, 1),
            "kernel_vs_torch": round(times["kernel"] / times["torch-gelu"], 3),
            "kernel_vs_one_pass": round(times["kernel"] / times["one-pass"], 3),
            "chunked_equals_one_pass": same,
            "rms_vs_exact_kernel": fp8.relative_rms(q_kernel.float() * s_kernel, exact),
            "rms_vs_exact_torch": fp8.relative_rms(q_torch.float() * s_torch, exact),
        }
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    report["rows"] = rows_out
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fp8_gelu.json").write_text(json.dumps(report, indent=2))
    chunks = " | ".join(f"chunk {chunk}" for chunk in CHUNKS)
    print(f"\n| tier | rows | torch-gelu | one pass | {chunks} | kernel ({fp8.GELU_CHUNK}) / torch | copy floor |")
    print("|---|---|---|---|" + "---|" * len(CHUNKS) + "---|---|")
    for r in rows_out:
        chunked = " | ".join(f"{r[f'chunk-{chunk}_ms']:.3f} ms" for chunk in CHUNKS)
        print(
            f"| {r['tier']} | {r['rows']} | {r['torch-gelu_ms']:.3f} ms | {r['one-pass_ms']:.3f} ms | {chunked} "
            f"| {r['kernel_vs_torch']:.2f} | {r['copy_ms']:.3f} ms |"
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    raise SystemExit(main(parser.parse_args()))
