"""The engine's VAE decode with the fused walk (studio.engine.vae_fused) against the decoder's own forward, in one
run: seconds per video, where the device time goes (kernels by kind), and the frames' difference.

Wan 2.1's VAE (diffusers' defaults) with random weights, bf16, channels-last weights and cuDNN timing its
algorithms (what the engine sets on an H200), 33 frames, one latent frame at a time as the engine decodes:

- `module`: the decoder's forward (what the engine did before);
- `fused-eager`: the fused walk, its joins as torch ops;
- `fused`: the fused walk, its norms compiled (what the engine serves where the kernel below fails its check);
- `fused-kernel`: the fused walk, its norm, SiLU and join in one Triton kernel (studio.engine.gpu.vae_kernels;
  what the engine serves on a GPU);
- `diffusers`: `vae.decode` as the plain pipeline call runs it (its frames joined as it goes), for reference.

    python benchmarks/experiments/vae_decode_gpu.py --out DIR
    python benchmarks/experiments/vae_decode_gpu.py --out DIR --device cpu --smoke     # checks the script

Writes DIR/vae_decode_gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from benchmarks.harness.wan_vae import benchmark_vae, fidelity
from studio.engine import vae_fused
from studio.engine.frames import to_uint8_tensor
from studio.engine.vae_chunks import vae_decode_chunks
from studio.engine.vae_decode import vae_conv_flags

TIERS = {"256p": (320, 192), "480p": (832, 480), "720p": (1280, 720)}
VARIANTS = ("module", "fused-eager", "fused", "fused-kernel", "diffusers")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    if any(part in lowered for part in ("conv", "xmma", "implicit", "cudnn", "sm90_", "sm80_", "wgrad", "dgrad")):
        return "convolutions"
    if "triton" in lowered:
        return "compiled (fused)"
    if "cat" in lowered or "copy" in lowered or "pad" in lowered:
        return "copies, joins, pads"
    if "reduce" in lowered or "norm" in lowered:
        return "reductions"
    if "upsample" in lowered:
        return "upsampling"
    if "attention" in lowered or "fmha" in lowered or "flash" in lowered:
        return "attention"
    if "elementwise" in lowered or "vectorized" in lowered or "unrolled" in lowered:
        return "elementwise"
    return "other"


def profile(decode: Any) -> dict[str, Any]:
    """Device time of one decode by kernel kind, and its 12 costliest kernels."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        decode()
        torch.cuda.synchronize()
    kinds: dict[str, float] = defaultdict(float)
    kernels: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        kinds[kernel_kind(event.name)] += us / 1000
        kernels[event.name[:90]] += us / 1000
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]
    return {
        "device_ms": round(sum(kinds.values()), 2),
        "by_kind_ms": {k: round(v, 2) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
        "top_kernels_ms": [[name, round(ms, 2)] for name, ms in top],
    }


def difference(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    return fidelity(a.cpu().numpy(), b.cpu().numpy())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="the tiny VAE, 256p: checks the script only")
    parser.add_argument("--tiers", default="256p,480p,720p")
    parser.add_argument("--batch-256p", type=int, default=8, help="also decode this many 256p videos together")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--profile-tier", default="480p", help="'' for no kernel profile")
    args = parser.parse_args()
    device = args.device
    if args.smoke:
        args.tiers, args.repeats, args.batch_256p, args.profile_tier = "256p", 1, 2, ""
    vae = benchmark_vae(device, args.smoke)
    dtype = vae.dtype
    walks = {
        "fused-eager": vae_fused.FusedWanDecoder(vae.decoder, compiled=False),
        "fused": vae_fused.FusedWanDecoder(vae.decoder, compiled=device == "cuda"),
    }
    variants = [v for v in args.variants.split(",") if v]
    kernel_problem = vae_fused.kernel_problem(device)
    if kernel_problem is None:
        walks["fused-kernel"] = vae_fused.FusedWanDecoder(vae.decoder, compiled=True, kernel=True)
    elif "fused-kernel" in variants:
        print(f"fused-kernel left out: {kernel_problem}", flush=True)
        variants.remove("fused-kernel")

    def engine_decode(z: torch.Tensor, variant: str) -> torch.Tensor:
        vae_fused.uninstall(vae)
        if variant in walks:
            vae_fused._INSTALLED[vae.decoder] = walks[variant]
        try:
            return torch.cat([to_uint8_tensor(v) for v in vae_decode_chunks(vae, z)], 1)
        finally:
            vae_fused.uninstall(vae)

    def decode(z: torch.Tensor, variant: str) -> torch.Tensor:
        if variant == "diffusers":
            return to_uint8_tensor(vae.decode(z, return_dict=False)[0])
        return engine_decode(z, variant)

    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "frames": args.frames,
        "fusable": vae_fused.fusable(vae.decoder),
        "kernel_problem": kernel_problem,
        "first_call_s": {},
        "tiers": {},
    }
    latent_frames = (args.frames - 1) // 4 + 1
    cases = []
    for tier in [t for t in args.tiers.split(",") if t]:
        cases.append((tier, 1))
        if tier == "256p" and args.batch_256p > 1:
            cases.append((tier, args.batch_256p))
    out_path = args.out / "vae_decode_gpu.json"
    args.out.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode(), vae_conv_flags(device):
        for tier, batch in cases:
            width, height = TIERS[tier]
            z = torch.randn(batch, vae.config.z_dim, latent_frames, height // 8, width // 8, device=device, dtype=dtype)
            row: dict[str, Any] = {}
            frames: dict[str, torch.Tensor] = {}
            for variant in variants:
                started = time.perf_counter()
                decode(z, variant)  # cuDNN times its algorithms, the compiler compiles
                sync(device)
                report["first_call_s"].setdefault(f"{tier} x{batch} {variant}", round(time.perf_counter() - started, 2))
            for variant in variants:  # interleaved rounds: clocks and heat drift alike for every variant
                row[variant] = {"seconds": []}
            for _ in range(args.repeats):
                for variant in variants:
                    sync(device)
                    started = time.perf_counter()
                    frames[variant] = decode(z, variant)
                    sync(device)
                    row[variant]["seconds"].append(round(time.perf_counter() - started, 4))
            base = statistics.median(row["module"]["seconds"]) if "module" in row else None
            for variant in variants:
                median = statistics.median(row[variant]["seconds"])
                row[variant]["median_s"] = round(median, 4)
                if base:
                    row[variant]["of_module"] = round(median / base, 3)
                if "module" in frames and variant != "module":
                    row[variant]["vs_module"] = difference(frames[variant], frames["module"])
            if device == "cuda" and tier == args.profile_tier and batch == 1:
                row["profile"] = {
                    v: profile(lambda v=v, z=z: decode(z, v))
                    for v in variants
                    if v in ("module", "fused", "fused-kernel")
                }
            report["tiers"][f"{tier} x{batch}"] = row
            out_path.write_text(json.dumps(report, indent=2))
    print(f"{'case':<12} " + " ".join(f"{v:>22}" for v in variants))
    for case, row in report["tiers"].items():
        cells = []
        for v in variants:
            cell = f"{row[v]['median_s']:.3f} s"
            if "of_module" in row[v]:
                cell += f" ({row[v]['of_module']:.2f})"
            cells.append(f"{cell:>22}")
        print(f"{case:<12} " + " ".join(cells))
        for v in variants:
            if "vs_module" in row[v]:
                print(f"  {v} vs module: {row[v]['vs_module']}")
        for v, prof in row.get("profile", {}).items():
            print(f"  profile {v}: {prof['device_ms']} ms {prof['by_kind_ms']}")
    print(json.dumps(report["first_call_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
