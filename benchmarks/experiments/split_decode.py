"""The VAE decode split in strips (studio.engine.parallel.split_decode), timed strip by strip on one device.

On N ranks each rank decodes one strip (with its halo) at the same time, so the split decode takes about the
slowest strip's time plus the exchange of the frames. This times the engine's whole decode (the per-latent-
frame loop it runs, as uint8 frames) and each strip's decode of the same latents on one GPU, side by side in
one run, for 2 and 4 strips: the ratio strip / whole is what the split saves before the exchange; the frames
of the strips are checked against the whole decode's.

    python benchmarks/experiments/split_decode.py --out DIR                   # a GPU: Wan 2.1's VAE (random weights), bf16
    python benchmarks/experiments/split_decode.py --out DIR --device cpu --smoke   # the tiny VAE: checks the script only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from benchmarks.harness.wan_vae import benchmark_vae
from studio.engine.frames import to_uint8_tensor
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.split_decode import decoder_halo, plan_strips, split_frames
from studio.engine.vae_chunks import vae_decode_chunks
from studio.engine.vae_decode import vae_conv_flags

TIERS = {"256p": (320, 192), "480p": (832, 480), "720p": (1280, 720)}


class OneStrip:
    """One rank of `parts` whose exchange hands back its own strip (here the strips are timed one by one)."""

    def __init__(self, index: int, parts: int):
        self.layout = RankLayout(1, parts, index)

    def gather_strips(self, strip: torch.Tensor, axis: int, widths: list[int]) -> torch.Tensor:
        return strip


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(device: str, repeats: int, fn) -> tuple[float, object]:
    """Median seconds of `repeats` runs after one untimed run (cuDNN picks its algorithms in the first)."""
    value = fn()
    sync(device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        value = fn()
        sync(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="the tiny VAE, 256p: checks the script only")
    parser.add_argument("--tiers", default="480p,720p")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = args.device
    if args.smoke:
        args.tiers, args.repeats = "256p", 1
    vae = benchmark_vae(device, args.smoke)
    dtype = vae.dtype
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "halo_latent_columns": decoder_halo(vae.decoder),
        "frames": args.frames,
        "tiers": {},
    }
    latent_frames = (args.frames - 1) // 4 + 1
    with torch.inference_mode(), vae_conv_flags(device):
        for tier in [t for t in args.tiers.split(",") if t]:
            width, height = TIERS[tier]
            z = torch.randn(1, vae.config.z_dim, latent_frames, height // 8, width // 8, device=device, dtype=dtype)
            whole_s, whole = timed(
                device, args.repeats, lambda z=z: torch.cat([to_uint8_tensor(v) for v in vae_decode_chunks(vae, z)], 1)
            )
            row: dict[str, object] = {"whole_s": round(whole_s, 4)}
            for parts in [int(p) for p in args.parts.split(",") if p]:
                axis = 3 if z.shape[-1] >= z.shape[-2] else 2
                strips = plan_strips(max(z.shape[-1], z.shape[-2]), parts, decoder_halo(vae.decoder))
                seconds, pieces = [], []
                for index in range(parts):
                    rank = OneStrip(index, parts)
                    strip_s, piece = timed(
                        device, args.repeats, lambda z=z, rank=rank: torch.cat(list(split_frames(vae, z, rank)), 1)
                    )
                    seconds.append(round(strip_s, 4))
                    pieces.append(piece)
                joined = torch.cat(pieces, dim=axis)
                difference = (joined.int() - whole.int()).abs()
                row[f"{parts} strips"] = {
                    "strip_widths_latent": [s.hi - s.lo for s in strips],
                    "strip_s": seconds,
                    "slowest_over_whole": round(max(seconds) / whole_s, 3),
                    "max_pixel_difference": int(difference.max()),
                    "mean_pixel_difference": round(float(difference.float().mean()), 5),
                }
            report["tiers"][tier] = row
            print(tier, json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "split_decode.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
