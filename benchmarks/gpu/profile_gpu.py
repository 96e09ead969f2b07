"""Where the engine's transformer spends its time on a GPU, kernel by kernel, and what the clocks do meanwhile.

One 480p forward (Wan2.1-1.3B's configuration, random weights, classifier-free guidance as a batch of 2,
189 frames by default, Cosmos 3's clip length) set up exactly as the engine sets it up (compiled blocks, the chosen
attention kernel, fused q/k/v), then:

- its device time per forward (CUDA events over a loop of forwards), as TFLOP/s and as a share of the bf16
  matrix-product rate measured in the same run (burst and sustained);
- a kernel trace (torch.profiler) summed by kind: matrix products, attention, the compiler's fused kernels
  and the rest, with the FLOPs torch counts for each kind, so that every kind has a rate;
- the SM clock and power the GPU reports (nvidia-smi) during the products and during the forwards: whether a
  forward runs at the clocks the matrix-product rate was measured at;
- each of --variants: the same forward as the engine would run it with and without its own kernels
  (studio.engine.gpu.kernels), side by side; and each of those kernels checked against plain torch.

    python benchmarks/gpu/profile_gpu.py --out DIR
    python benchmarks/gpu/profile_gpu.py --out DIR --variants plain,fused,tuned-pointwise

Writes DIR/profile_gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch._inductor.config

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness.wan_model import TIERS, build_pipeline, matmul_rate, matmul_rate_burst
from studio.engine.denoise import TransformerForward
from studio.engine.generator import VideoGenerator

log = logging.getLogger("profile_gpu")

KINDS = (
    ("fused (compiler)", re.compile(r"^triton", re.I)),
    ("engine kernels", re.compile(r"^omni_", re.I)),
    ("attention", re.compile(r"fmha|flash|sdpa|attention|attn", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|xmma|cutlass|cublas|sm90_|wgmma|splitk", re.I)),
)
# FLOP counter op names -> kind
FLOP_KINDS = {"attention": ("attention",), "matmul": ("mm", "convolution")}


def kind_of(kernel: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(kernel):
            return kind
    return "other"


class ClockSampler:
    """SM clock (MHz) and board power (W) from nvidia-smi, sampled every 50 ms while open."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        index = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        try:
            self._proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "-i",
                    index,
                    "--query-gpu=clocks.sm,power.draw",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "50",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                clock, power = (float(part) for part in line.split(","))
            except ValueError:
                continue
            self.samples.append((clock, power))

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict[str, float | int | None]:
        if not self.samples:
            return {"samples": 0}
        clocks = [c for c, _ in self.samples]
        powers = [p for _, p in self.samples]
        return {
            "samples": len(self.samples),
            "sm_clock_mhz_median": statistics.median(clocks),
            "sm_clock_mhz_min": min(clocks),
            "power_w_median": statistics.median(powers),
            "power_w_max": max(powers),
        }


def forward_inputs(pipe: Any, tier: str, frames: int, batch: int) -> tuple[torch.Tensor, ...]:
    width, height = TIERS[tier]
    transformer = pipe.transformer
    latent_frames = (frames - 1) // pipe.vae_scale_factor_temporal + 1
    shape = (batch, 16, latent_frames, height // pipe.vae_scale_factor_spatial, width // pipe.vae_scale_factor_spatial)
    x = torch.randn(shape, device="cuda", dtype=transformer.dtype)
    t = torch.full((batch,), 500.0, device="cuda")
    context = torch.randn(batch, 512, transformer.config.text_dim, device="cuda", dtype=transformer.dtype)
    return x, t, context


def flops_by_kind(pipe: Any, inputs: tuple[torch.Tensor, ...]) -> dict[str, float]:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        pipe.transformer(
            hidden_states=inputs[0], timestep=inputs[1], encoder_hidden_states=inputs[2], return_dict=False
        )
    totals: dict[str, float] = defaultdict(float)
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).removeprefix("aten.").split(".")[0]
        kind = next((k for k, names in FLOP_KINDS.items() if any(n in name for n in names)), "other")
        totals[kind] += flops
    return dict(totals)


def time_forward(forward: Any, inputs: tuple[torch.Tensor, ...], count: int) -> tuple[float, dict[str, Any]]:
    """Seconds per forward (device time of `count` forwards in a row), and the clocks meanwhile."""
    with torch.inference_mode():
        for _ in range(2):
            forward(*inputs)
        torch.cuda.synchronize()
        with ClockSampler() as clocks:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(count):
                forward(*inputs)
            end.record()
            end.synchronize()
    return start.elapsed_time(end) / 1000 / count, clocks.summary()


def kernel_trace(forward: Any, inputs: tuple[torch.Tensor, ...], count: int) -> dict[str, Any]:
    """Kernel device time per forward, by kind and for the 25 largest kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode():
        forward(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(count):
                forward(*inputs)
            torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        entry = per_kernel[event.name]
        entry[0] += event.time_range.elapsed_us() / 1000 / count  # ms per forward
        entry[1] += 1 / count
    by_kind: dict[str, float] = defaultdict(float)
    for name, (ms, _) in per_kernel.items():
        by_kind[kind_of(name)] += ms
    top = sorted(per_kernel.items(), key=lambda item: -item[1][0])[:25]
    return {
        "ms_per_forward_by_kind": {k: round(v, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "kernels_per_forward": round(sum(n for _, n in per_kernel.values())),
        "top": [
            {"kernel": name[:140], "kind": kind_of(name), "ms": round(ms, 3), "calls": round(n, 1)}
            for name, (ms, n) in top
        ],
    }


# --- variants --------------------------------------------------------------------------------------------


def configure(generator: VideoGenerator, variant: str) -> None:
    """Apply `variant` to the generator's loaded transformer and compile its blocks again. Variants add up, in
    the order given: `plain` (as the engine loads it without its own kernels), `fused` (the engine's kernels,
    studio.engine.gpu.kernels), `tuned-pointwise` (the compiler also times the block sizes of its fused kernels), `fp8` and `fp8-ffn` (the
    blocks' products in fp8, studio.engine.gpu.fp8: all their linear layers, or the feed-forward's alone), `fp8-gelu-kernel`
    (`fp8` with the feed-forward's GELU, row maximum and cast in the engine's Triton kernel instead of inductor's),
    `fp8-served` (what `--quantization fp8` serves: that kernel and fast accumulation in the products)."""
    transformer = generator.pipe.transformer
    if variant == "fused":
        generator.gpu.install_kernels(generator.pipe)
        if not generator.gpu.kernels:
            raise RuntimeError("the engine's kernels did not install (see the log)")
    elif variant == "tuned-pointwise":
        # A global setting, as the engine sets it: torch.compile's `options` cannot be given with a `mode`.
        torch._inductor.config.coordinate_descent_tuning = True
    elif variant in ("fp8", "fp8-ffn", "fp8-gelu-kernel", "fp8-served"):
        from studio.engine.gpu import fp8

        kinds = fp8.LAYER_KINDS if variant != "fp8-ffn" else ("ffn",)
        if generator.gpu.fp8 is not None:
            generator.gpu.fp8.undo()
        generator.gpu.fp8, generator.gpu.fp8_difference = fp8.install_checked(
            transformer,
            "cuda",
            kinds,
            gelu_kernel=variant in ("fp8-gelu-kernel", "fp8-served"),
            fast_accum=variant == "fp8-served",
        )
    elif variant != "plain":
        raise ValueError(f"unknown variant {variant!r}")
    torch.compiler.reset()
    transformer.compile_repeated_blocks(fullgraph=True, mode=generator.gpu.compile_mode, dynamic=False)


def kernel_checks(tokens: int = 14040, channels: int = 1536, heads: int = 12) -> dict[str, Any]:
    """Each engine kernel against the plain torch arithmetic it stands for, on random data at the 480p shape:
    largest difference relative to the largest reference value."""
    from studio.engine.gpu import kernels

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return round(((a.float() - b.float()).abs().max() / b.float().abs().max()).item(), 6)

    out: dict[str, Any] = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    bf16 = torch.bfloat16
    x = torch.randn(2, 512, channels, device="cuda", generator=g)
    w = torch.randn(4 * channels, channels, device="cuda", generator=g) / channels**0.5
    b = torch.randn(4 * channels, device="cuda", generator=g)
    reference = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate="tanh")
    out["linear_gelu_tanh_fp32"] = rel(kernels.linear_gelu_tanh(x, w, b), reference)
    out["linear_gelu_tanh_bf16"] = rel(kernels.linear_gelu_tanh(x.to(bf16), w.to(bf16), b.to(bf16)), reference)
    erf = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))
    out["linear_gelu_tanh_fp32_vs_erf"] = rel(kernels.linear_gelu_tanh(x, w, b), erf)
    qkv = torch.randn(2, tokens, 3 * channels, device="cuda", generator=g, dtype=bf16) * 3
    q, k, v = qkv.chunk(3, dim=-1)
    wq, wk = (torch.rand(channels, device="cuda", generator=g, dtype=bf16) + 0.5 for _ in range(2))
    angles = torch.rand(tokens, channels // heads // 2, device="cuda", generator=g) * 6
    cos = angles.cos().repeat_interleave(2, dim=-1).to(bf16)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(bf16)
    fq, fk = kernels.qk_norm_rope(q, k, wq, wk, cos, sin, 1e-6, heads)
    rq, rk = kernels.qk_norm_rope_reference(q, k, wq, wk, cos, sin, 1e-6, heads)
    out["qk_norm_rope_bf16"] = max(rel(fq, rq), rel(fk, rk))
    vh = v.unflatten(2, (heads, -1))
    got = kernels.attention_bnhd(fq, fk, vh, "cudnn")
    want = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2).float() for t in (rq, rk, vh)))
    out["attention_bnhd_cudnn_vs_fp32"] = rel(got, want.transpose(1, 2))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        raw = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (fq, fk, vh)))
    out["cudnn_output_in_q_layout"] = bool(raw.transpose(1, 2).is_contiguous())
    return out


def attention_layouts(batch: int = 2, tokens: int = 14040, heads: int = 12, head_dim: int = 128) -> dict[str, Any]:
    """cuDNN attention at the 480p shape with its inputs in each layout the engine could hand it: milliseconds
    per call (median of 3 interleaved rounds of 10 calls) and TFLOP/s."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qkv = torch.randn(batch, tokens, 3 * heads * head_dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.unflatten(2, (heads, -1)) for x in qkv.chunk(3, dim=-1))
    dense = [x.contiguous() for x in (q, k, v)]
    cases = {
        "(B,H,N,D) dense: copies in and out": tuple(x.transpose(1, 2).contiguous() for x in dense),
        "(B,N,H,D) q, k dense, v a view of the q/k/v product": (
            dense[0].transpose(1, 2),
            dense[1].transpose(1, 2),
            v.transpose(1, 2),
        ),
        "(B,N,H,D) q, k, v dense": tuple(x.transpose(1, 2) for x in dense),
    }
    flops = 4 * batch * heads * tokens * tokens * head_dim
    times: dict[str, list[float]] = defaultdict(list)
    with torch.inference_mode(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for args in cases.values():
            torch.nn.functional.scaled_dot_product_attention(*args)
        for _ in range(3):
            for name, args in cases.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(10):
                    torch.nn.functional.scaled_dot_product_attention(*args)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end) / 10)
    return {
        name: {"ms": round(statistics.median(ms), 3), "tflops": round(flops / statistics.median(ms) / 1e9, 1)}
        for name, ms in times.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--tier", default="480p")
    parser.add_argument("--frames", type=int, default=189, help="Cosmos 3's clip length by default")
    parser.add_argument("--batch", type=int, default=2, help="samples per forward (2: one video with guidance)")
    parser.add_argument("--count", type=int, default=12, help="forwards per timing")
    parser.add_argument("--variants", default="plain,fused")
    parser.add_argument("--layouts", action="store_true", help="also time cuDNN attention per input layout")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    for noisy in ("diffusers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "variants": {}}

    def save() -> None:
        (args.out / "profile_gpu.json").write_text(json.dumps(report, indent=2, default=str))

    report["env"] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "cudnn": torch.backends.cudnn.version(),
    }
    with ClockSampler() as clocks:
        burst = matmul_rate_burst("cuda")
    report["bf16_tflops_burst"] = round(burst / 1e12, 1)
    report["clocks_burst"] = clocks.summary()
    with ClockSampler() as clocks:
        sustained = matmul_rate("cuda")
    report["bf16_tflops_sustained"] = round(sustained / 1e12, 1)
    report["clocks_sustained"] = clocks.summary()
    pipe, _ = build_pipeline("cuda", smoke=False, text_layers=2)
    inputs = forward_inputs(pipe, args.tier, args.frames, args.batch)
    flops = flops_by_kind(pipe, inputs)
    report["tflop_per_forward_by_kind"] = {k: round(v / 1e12, 3) for k, v in flops.items()}
    total_flops = sum(flops.values())
    generator = VideoGenerator("wan-random", device="cuda", cuda_graphs=False, fused_kernels=False)
    generator.load(pipeline=pipe)
    gpu = generator.gpu
    report["engine"] = {"attention": gpu.attention_backend, "compile": gpu.compile, "fused_qkv": gpu.fused_qkv}
    report["kernel_checks"] = kernel_checks()
    if args.layouts:
        report["attention_layouts"] = attention_layouts()
    save()
    for variant in [v for v in args.variants.split(",") if v]:
        try:
            started = time.perf_counter()
            generator.on_device_thread(configure, generator, variant)
            forward = TransformerForward(generator.pipe)
            seconds, clocks_fwd = generator.on_device_thread(time_forward, forward, inputs, args.count)
            compile_s = time.perf_counter() - started
            trace = generator.on_device_thread(kernel_trace, forward, inputs, 3)
            rates = {
                kind: round(flops.get(kind, 0.0) / (ms / 1000) / 1e12, 1)
                for kind, ms in trace["ms_per_forward_by_kind"].items()
                if flops.get(kind) and ms > 0
            }
            report["variants"][variant] = {
                "ms_per_forward": round(seconds * 1000, 2),
                "tflops": round(total_flops / seconds / 1e12, 1),
                "of_burst": round(total_flops / seconds / burst, 4),
                "of_sustained": round(total_flops / seconds / sustained, 4),
                "clocks": clocks_fwd,
                "tflops_by_kind": rates,
                "setup_and_timing_s": round(compile_s, 1),
                **trace,
            }
        except Exception as exc:
            log.exception("variant %s failed", variant)
            report["variants"][variant] = {"error": f"{type(exc).__name__}: {exc}"}
        save()
        row = report["variants"][variant]
        log.info("%s: %s", variant, {k: row.get(k) for k in ("ms_per_forward", "tflops", "of_burst", "error")})
    print(json.dumps({k: v for k, v in report.items() if k != "variants"}, indent=1))
    for variant, row in report["variants"].items():
        print(f"\n== {variant}")
        print(json.dumps({k: v for k, v in row.items() if k != "top"}, indent=1))
        for kernel in row.get("top", []):
            print(f"  {kernel['ms']:8.3f} ms {kernel['calls']:6.1f}x {kernel['kind']:16s} {kernel['kernel']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
