#!/usr/bin/env python
"""Train Omni Studio's small text-to-video model on procedural clips and save it as a diffusers pipeline.

Data: scenes of the prompt grammar (studio/smallmodel/grammar.py) with the held-out combinations left out,
rendered on the fly (canonical layouts, each scene shifted by a random placement the model is told): the noisy input
is 9 key frames at the native sizes 40x24, 24x40, 24x24, 32x24 and 24x32, the targets are the clean colors at
points anywhere in space and time (half of them around the objects), drawn exactly there with borders one pixel
of the pipeline's drawing canvas wide. Model: OmniFieldDenoiser (a per-point field modulated by the prompt and
the noise level, with a motion head) and a bag-of-words OmniTextEncoder, about 0.23M parameters in all.
Objective: rectified flow with clean-clip prediction (x_s = (1 - s) x0 + s noise, the net predicts x0 at the
points); noise levels uniform with a quarter exactly 1, where sampling starts. The motion head also learns the
prompt's motion as numbers (velocity in short sides per half clip, log growth), which moves the coordinates every
point sees. AdamW, warm-up, cosine decay.

The shipped model (assets/omni-small-t2v) came from the defaults on an NVIDIA H200 (301 s, sharing the GPU with a
second run); its training.json records the command:
    python scripts/train_small_t2v.py --device cuda
On the CPU the same run takes hours (about 1 s a step on one thread):
    python scripts/train_small_t2v.py --device cpu
Smoke run:
    python scripts/train_small_t2v.py --out /tmp/t2v --steps 20 --log-every 5

Seeded and reproducible: the same --seed, --steps, --batch-size and device give the same weights (CPU bit for
bit; on a GPU up to the rounding of its atomic additions in the trilinear reads' backward pass). Writes DIR/{model_index.json, text_encoder/, transformer/, scheduler/} (safetensors) and training.json
(settings, loss history, time, command).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studio.grammar import random_prompt, train_scenes, vocabulary  # noqa: E402
from studio.smallmodel import build_pipeline  # noqa: E402
from studio.smallmodel.clips import (  # noqa: E402
    EXTENT,
    render_clips,
    render_points,
    sample_layouts,
    sample_placements,
)

# (width, height) native canvases and how often each is drawn (16:9 is what most requests ask for).
SIZES = ((40, 24), (24, 40), (24, 24), (32, 24), (24, 32))
SIZE_WEIGHTS = (0.4, 0.15, 0.15, 0.15, 0.15)
KEYFRAMES = 9
MAX_BYTES = 20 * 2**20  # assets/ budget for the model


def log(message: str) -> None:
    print(message, flush=True)


class ClipStream:
    """Seeded batches of (prompts, clean key frames (B, 3, K, H, W) in [-1, 1], points (B, N, 3) in field coordinates,
    the clean colors there (B, N, 3) in [-1, 1], placements (B, 2), motion truth (B, 3))."""

    def __init__(self, seed: int, batch_size: int, points: int, edge: float, device: torch.device) -> None:
        self.rng = random.Random(seed)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.point_generator = torch.Generator(device=device).manual_seed(seed + 2)
        self.scenes = train_scenes()
        self.batch_size = batch_size
        self.points = points
        self.edge = edge
        self.device = device

    def _uniform(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=self.point_generator, device=self.device)

    def next(self):
        width, height = self.rng.choices(SIZES, SIZE_WEIGHTS)[0]
        scenes = [self.rng.choice(self.scenes) for _ in range(self.batch_size)]
        prompts = [random_prompt(scene, self.rng) for scene in scenes]
        placement = sample_placements(self.batch_size, self.generator)
        layouts = sample_layouts(scenes, width, height, self.generator, "canonical", placement).to(self.device)
        keys = render_clips(layouts, width, height, KEYFRAMES, self.edge)  # (B, K, H, W, 3) in [0, 1]
        clean = (keys * 2.0 - 1.0).permute(0, 4, 1, 2, 3).contiguous()
        # Half the points anywhere in the clip, half around an object (a few percent of the clip but all of its
        # meaning, and its edges are where drawing is hard).
        b, half = self.batch_size, self.points // 2
        size = torch.tensor([width, height], device=self.device, dtype=torch.float32)
        anywhere = self._uniform(b, half, 3) * torch.cat([size, size.new_ones(1)])
        phase = self._uniform(b, half)
        second = (self._uniform(b, half) < 0.5) & (layouts.count[:, None] == 2)
        centers = layouts.centers_at(phase)  # (B, N, 2 objects, 2)
        center = torch.where(second[..., None], centers[:, :, 1], centers[:, :, 0])
        reach = 1.5 * EXTENT * layouts.sizes_at(phase)[..., None]
        around = (center + (self._uniform(b, half, 2) * 2.0 - 1.0) * reach).clamp(min=0.0)
        around = torch.minimum(around, size)
        pixels = torch.cat([anywhere, torch.cat([around, phase[..., None]], dim=-1)], dim=1)
        target = render_points(layouts, pixels, self.edge) * 2.0 - 1.0
        short = float(min(width, height))
        points = torch.cat([(pixels[..., :2] - size / 2) / short, pixels[..., 2:] * 2.0 - 1.0], dim=-1)
        # What the motion head learns: object 0's velocity in short sides per half clip, and its log growth.
        velocity = (layouts.end[:, 0] - layouts.start[:, 0]) / 2.0 / short
        growth = torch.log(layouts.size_end / layouts.size_start) / 2.0
        motion = torch.cat([velocity, growth[:, None]], dim=1)
        return prompts, clean, points, target, placement.to(self.device), motion


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    warm = min(1.0, (step + 1) / warmup)
    return peak * warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * step / total)))


def train(args: argparse.Namespace) -> int:
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    pipe = build_pipeline(
        vocabulary(),
        denoiser={"width": args.width, "depth": args.depth, "frequencies": args.frequencies},
        text={"dim": args.text_dim},
    )
    text_encoder, denoiser = pipe.text_encoder.to(device).train(), pipe.transformer.to(device).train()
    params = list(text_encoder.parameters()) + list(denoiser.parameters())
    n_params = sum(p.numel() for p in params)
    log(
        f"device {device}, {n_params / 1e6:.3f}M parameters, batch {args.batch_size}, {args.steps} steps, seed {args.seed}"
    )
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    # Shapes' borders blend over one pixel of the canvas the pipeline draws on, draw_scale times the key frames'.
    stream = ClipStream(args.seed + 1, args.batch_size, args.pixels, 1.0 / pipe.config.draw_scale, device)
    noise_generator = torch.Generator(device=device).manual_seed(args.seed + 3)
    history: list[dict] = []
    started = time.perf_counter()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
        prompts, clean, points, target, placement, motion = stream.next()
        b = clean.shape[0]
        sigma = torch.rand(b, generator=noise_generator, device=device)
        pure = torch.rand(b, generator=noise_generator, device=device) < args.pure_noise
        sigma = torch.where(pure, torch.ones_like(sigma), sigma)
        noise = torch.randn(clean.shape, generator=noise_generator, device=device)
        noisy = (1.0 - sigma.view(-1, 1, 1, 1, 1)) * clean + sigma.view(-1, 1, 1, 1, 1) * noise
        states, mask = text_encoder.encode(prompts, device)
        predicted = denoiser(noisy, sigma, states, mask, points=points, placement=placement)
        pixel_loss = ((predicted - target) ** 2).mean()
        motion_loss = ((denoiser.predict_motion(states, mask) - motion) ** 2).mean()
        loss = pixel_loss + args.motion_weight * motion_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if (step + 1) % args.log_every == 0 or step == args.steps - 1:
            elapsed = time.perf_counter() - started
            entry = {
                "step": step + 1,
                "loss": round(loss.item(), 5),
                "pixel_loss": round(pixel_loss.item(), 5),
                "motion_loss": round(motion_loss.item(), 5),
                "elapsed_s": round(elapsed, 1),
            }
            history.append(entry)
            log(
                f"step {step + 1:5d}/{args.steps}  loss {entry['loss']:.4f}  (pixels {entry['pixel_loss']:.4f}, "
                f"motion {entry['motion_loss']:.4f})  lr {optimizer.param_groups[0]['lr']:.2e}  {elapsed:.0f} s"
            )
    train_time = time.perf_counter() - started

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pipe.register_modules(text_encoder=text_encoder.eval().to("cpu"), transformer=denoiser.eval().to("cpu"))
    pipe.save_pretrained(out, safe_serialization=True)
    record = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "pixels_per_clip": args.pixels,
        "seed": args.seed,
        "lr": args.lr,
        "warmup": args.warmup,
        "pure_noise": args.pure_noise,
        "motion_weight": args.motion_weight,
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(),
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "torch": torch.__version__,
        "parameters": n_params,
        "train_time_s": round(train_time, 1),
        "final_loss": history[-1]["loss"] if history else None,
        "loss_history": history,
        "command": " ".join(["python scripts/train_small_t2v.py", *sys.argv[1:]]),
    }
    (out / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    log(f"saved {out} ({size / 2**20:.2f} MiB) after {args.steps} steps in {train_time:.0f} s")
    if size > MAX_BYTES:
        log(f"warning: {size / 2**20:.1f} MiB is over the {MAX_BYTES / 2**20:.0f} MiB that assets/ allows")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "assets" / "omni-small-t2v"), help="where the pipeline goes")
    parser.add_argument("--steps", type=int, default=16000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--pixels", type=int, default=1024, help="points per clip in each step's loss")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--pure-noise", type=float, default=0.25, help="share of clips at noise level 1")
    parser.add_argument("--motion-weight", type=float, default=0.5, help="weight of the motion head's loss")
    parser.add_argument("--width", type=int, default=96, help="the field's hidden width")
    parser.add_argument("--depth", type=int, default=4, help="the field's hidden layers")
    parser.add_argument("--frequencies", type=int, default=6, help="octaves of the field's Fourier features")
    parser.add_argument("--text-dim", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    parser.add_argument("--log-every", type=int, default=100)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.pixels < 2:
        parser.error("--steps, --batch-size must be at least 1 and --pixels at least 2")
    return train(args)


if __name__ == "__main__":
    raise SystemExit(main())
