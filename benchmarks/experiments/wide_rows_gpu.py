"""The compiler's kernels for a Wan block's row reductions, with inductor's own choice (a loop over each row's
chunks, one per reduction) and with the rows kept in registers, side by side.

torch.compile's inductor writes a reduction along rows of up to 1,024 elements as a persistent kernel (each row
loaded once into registers); a wider row gets a loop over chunks, and each reduction in the kernel (a layer norm's
mean and variance, then an fp8 cast's row maximum) loads the row again. Wan 2.1 1.3B's rows are 1,536 wide.
`WideRowChoices` (benchmarks/harness/wide_rows.py: inductor's own hook for its heuristics,
`torch._inductor.config.inductor_choices_class`) keeps rows up to a limit in registers. The engine does not use it:
end to end it measured no faster (benchmarks/RESULTS.md); `benchmarks/gpu/levers_gpu.py --quantizations
bf16,bf16-wide-rows,...` compares it there.

Each pass is what the compiled blocks fuse around a product, at Wan 2.1 1.3B's width (1,536) and a 2B model's
(2,048), at 480p's and 720p's token counts with the guidance pair (B=2, 33 frames):

- `norm-modulate`: the layer norm and the modulation before a bf16 product (x * (1 + scale) + shift);
- `norm-modulate-fp8`: the same, then each row's largest magnitude and the e4m3 cast an fp8 product takes;
- `rms-norm`: the RMS norm of q across heads (with its weight).

For each: the kernel kind inductor wrote (persistent or looped), microseconds per call (CUDA events, median of
rounds), the bytes the pass must move over that time, and the largest difference between the two choices'
outputs.

    python benchmarks/experiments/wide_rows_gpu.py --out DIR

Writes DIR/wide_rows_gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from torch._inductor import config

from benchmarks.harness.wide_rows import ROW_LIMIT, use
from studio.engine.gpu.fp8 import quantize_rows

TOKENS = {"480p": 2 * 14040, "720p": 2 * 32400}  # the guidance pair's rows at 33 frames


def norm_modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    normed = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), eps=1e-6)
    return (normed * (1 + scale) + shift).to(x.dtype)


def norm_modulate_fp8(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return quantize_rows(norm_modulate(x, scale, shift))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps=1e-6)


PASSES: dict[str, tuple[Callable[..., Any], int]] = {
    # name: (the pass, bytes moved per row element: bf16 in, and bf16 or e4m3 out)
    "norm-modulate": (norm_modulate, 4),
    "norm-modulate-fp8": (norm_modulate_fp8, 3),
    "rms-norm": (rms_norm, 4),
}


def compiled(fn: Callable[..., Any], limit: int, inputs: tuple[torch.Tensor, ...]) -> tuple[Callable[..., Any], str]:
    """`fn` compiled under the row `limit` (0: inductor's own choice), and the kind of reduction kernel inductor
    wrote for it ("persistent" or "looped")."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    use(limit)
    fn_compiled = torch.compile(fn, dynamic=False)
    _, code = run_and_get_code(fn_compiled, *inputs)
    source = "\n".join(code)
    kinds = {kind for kind, marker in (("persistent", "triton_per_"), ("looped", "triton_red_")) if marker in source}
    return fn_compiled, "+".join(sorted(kinds)) or "none"


def time_us(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], calls: int = 50, rounds: int = 5) -> float:
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def largest_difference(a: Any, b: Any) -> float:
    a, b = (a[0].float() * a[1], b[0].float() * b[1]) if isinstance(a, tuple) else (a.float(), b.float())
    return float((a - b).abs().max() / b.abs().max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--widths", default="1536,2048")
    parser.add_argument("--tiers", default="480p,720p")
    parser.add_argument("--passes", default=",".join(PASSES))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    config.coordinate_descent_tuning = True  # as the engine compiles
    config.fx_graph_cache = False  # each choice compiled afresh
    report: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)},
        "rows": [],
    }
    generator = torch.Generator(device="cuda").manual_seed(0)
    for width in (int(w) for w in args.widths.split(",")):
        for tier in args.tiers.split(","):
            rows = TOKENS[tier]
            x = torch.randn(rows, width, device="cuda", generator=generator).to(torch.bfloat16) * 3
            scale = torch.randn(width, device="cuda", generator=generator) * 0.1
            shift = torch.randn(width, device="cuda", generator=generator) * 0.1
            for name in args.passes.split(","):
                fn, bytes_per_element = PASSES[name]
                inputs = (x, scale, shift) if name != "rms-norm" else (x, scale.to(torch.bfloat16) + 1, shift)
                row: dict[str, Any] = {"pass": name, "width": width, "tier": tier, "rows": rows}
                outputs = {}
                for label, limit in (("inductor", 0), ("wide", ROW_LIMIT)):
                    fn_compiled, kind = compiled(fn, limit, inputs)
                    us = time_us(fn_compiled, inputs)
                    outputs[label] = fn_compiled(*inputs)
                    row[label] = {
                        "kernel": kind,
                        "us": round(us, 1),
                        "tb_per_s": round(rows * width * bytes_per_element / us / 1e6, 2),
                    }
                row["wide_of_inductor"] = round(row["wide"]["us"] / row["inductor"]["us"], 3)
                row["largest_difference"] = largest_difference(outputs["wide"], outputs["inductor"])
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
                (args.out / "wide_rows_gpu.json").write_text(json.dumps(report, indent=2))
    use(0)
    print("\n| pass | width | tier | inductor: kernel, us, TB/s | wide rows: kernel, us, TB/s | wide / inductor |")
    print("|---|---|---|---|---|---|")
    for row in report["rows"]:
        a, b = row["inductor"], row["wide"]
        print(
            f"| {row['pass']} | {row['width']} | {row['tier']} | {a['kernel']}, {a['us']}, {a['tb_per_s']} "
            f"| {b['kernel']}, {b['us']}, {b['tb_per_s']} | {row['wide_of_inductor']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
