#!/usr/bin/env python
"""Fit a pipeline's latent-to-RGB map (what the embedded engine's previews project latents with) from its VAE's own
decoder, and write it as JSON (studio/engine/latent_rgb.py describes the file).

Samples that look like videos are encoded with the VAE's encoder and decoded again: the engine's procedural clips
(drifting gradients, moving soft discs, colour fields of low frequency) and the small model's grammar scenes
(studio/smallmodel/clips.py). The decoded frames, averaged onto the latent grid, are fitted by least squares from
the normalised latents; the file keeps the 3 x C weights, the bias, the fit's error (RMSE in 0-255 levels) and the
VAE's fingerprint (its configuration and a hash of its weights), which the engine matches against the VAE it loads.

    python scripts/fit_latent_rgb.py --model assets/tiny-wan --out assets/latent_rgb/tiny-wan.json \\
        --note "random weights: a proxy"
    python scripts/fit_latent_rgb.py --model /models/Wan2.1-T2V-1.3B-Diffusers --out assets/latent_rgb/wan2.1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studio.engine.latent_rgb import fitted_map, vae_fingerprint  # noqa: E402
from studio.engine.latent_rgb_fit import FIT_FRAMES, FIT_SIZE, procedural_clips  # noqa: E402


def load_vae(model: Path, device: str) -> torch.nn.Module:
    """The pipeline's VAE (its `vae/` folder), in float32: the fingerprint hashes the weights as bfloat16, so the
    engine's VAE in either precision matches."""
    import diffusers

    config = json.loads((model / "vae" / "config.json").read_text())
    vae_class = getattr(diffusers, config["_class_name"])
    return vae_class.from_pretrained(model, subfolder="vae", torch_dtype=torch.float32).to(device).eval()


def scene_clips(count: int, frames: int, size: int, seed: int) -> torch.Tensor:
    """`count` of the small model's grammar scenes, rendered as (count, 3, frames, size, size) in [-1, 1]."""
    import random

    from studio.grammar import all_scenes
    from studio.smallmodel.clips import render_scenes

    scenes = random.Random(seed).sample(all_scenes(), count)
    video, _ = render_scenes(scenes, width=size, height=size, num_frames=frames, seed=seed)
    return video.permute(0, 4, 1, 2, 3) * 2.0 - 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a diffusers pipeline folder with a vae/")
    parser.add_argument("--out", type=Path, required=True, help="the map's JSON file")
    parser.add_argument("--clips", type=int, default=12, help="procedural clips")
    parser.add_argument("--scenes", type=int, default=12, help="scenes of the small model's grammar")
    parser.add_argument("--frames", type=int, default=FIT_FRAMES, help="frames per clip (4k+1)")
    parser.add_argument("--size", type=int, default=FIT_SIZE, help="clip side in pixels (a multiple of 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--note", default="", help="said in the file (e.g. that the weights are random)")
    args = parser.parse_args()

    started = time.perf_counter()
    vae = load_vae(args.model, args.device)
    clips = torch.cat(
        [
            procedural_clips(args.clips, args.frames, args.size, args.size, seed=args.seed),
            scene_clips(args.scenes, args.frames, args.size, args.seed),
        ]
    )
    note = f"fitted by scripts/fit_latent_rgb.py on {len(clips)} clips of {args.frames}x{args.size}x{args.size}"
    rgb_map = fitted_map(vae, vae_fingerprint(vae), note=f"{args.note}; {note}" if args.note else note, clips=clips)
    rgb_map.save(args.out)
    print(
        f"{args.out}: {rgb_map.samples} latents, error {rgb_map.rmse:.2f} levels of 255, "
        f"fingerprint {rgb_map.fingerprint[:16]}..., {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
