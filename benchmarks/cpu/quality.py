"""Does the model follow its prompt? Held-out prompts of the small model's grammar, generated through the engine's
own generator, decoded and read back: is the dominant moving object's color right, is its motion right
(left/right/up/down/still/growing/shrinking), is the number of objects right, is the shape right (per shape), and
how many frames show exactly as many separate pieces as objects asked (no merges, splits or specks)?

The prompts are combinations excluded from training (studio/smallmodel/grammar.py: heldout_scenes), in the canonical
phrasing, e.g. "two blue squares moving up on a black background". Works with any diffusers text-to-video model dir
(the baseline: assets/tiny-wan); `--model groundtruth` reads the clip generator's own clips (checks the reader).

    python benchmarks/cpu/quality.py --model assets/omni-small-t2v --prompts 200 --seed 0 --out report/quality.json
    python benchmarks/cpu/quality.py --model assets/tiny-wan --prompts 100

Prints color / direction / count / shape accuracy (per motion and per shape) and the share of frames with the
right number of pieces; --out writes them with every prompt's reading as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

import numpy as np

from benchmarks.harness import ROOT
from studio import tiers
from studio.grammar import Scene, heldout_scenes
from studio.smallmodel.analysis import read_video

DEFAULT_MODEL = ROOT / "assets" / "omni-small-t2v"
GROUND_TRUTH = "groundtruth"


@dataclass
class Item:
    prompt: str
    seed: int
    aspect: str
    truth: dict
    color: str | None
    motion: str | None
    count: int
    shape: str | None
    pieces: list[int]
    color_ok: bool
    motion_ok: bool
    count_ok: bool
    shape_ok: bool
    pieces_ok: int  # frames with as many pieces as objects asked
    native_size: str
    seconds: float
    details: dict


@dataclass
class Report:
    model: str
    prompts: int
    seed: int
    steps: int
    guidance: float
    frames: int
    tier: str
    aspects: list[str]
    color_accuracy: float
    direction_accuracy: float
    count_accuracy: float
    shape_accuracy: float
    shape_by_shape: dict[str, float]
    pieces_accuracy: float  # share of all frames
    direction_by_motion: dict[str, float]
    median_generate_s: float
    through_mp4: bool
    items: list[Item]

    def summary(self) -> str:
        lines = [
            f"model {self.model}: {self.prompts} held-out prompts, seed {self.seed}, {self.steps} steps, "
            f"guidance {self.guidance}, {self.frames} frames, {self.tier} {','.join(self.aspects)}",
            f"  color correct     {self.color_accuracy:6.1%}",
            f"  direction correct {self.direction_accuracy:6.1%}",
            f"  count correct     {self.count_accuracy:6.1%}",
            f"  shape correct     {self.shape_accuracy:6.1%}  ("
            + ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.shape_by_shape.items()))
            + ")",
            f"  frames with the right number of pieces {self.pieces_accuracy:6.1%}",
            "  direction by motion: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.direction_by_motion.items())),
            f"  median generate time {self.median_generate_s:.2f} s per clip",
        ]
        return "\n".join(lines)


def pick_prompts(n: int, seed: int) -> list[tuple[Scene, int]]:
    """n held-out scenes (shuffled by seed; cycled with new generation seeds past the held-out set's size)."""
    scenes = heldout_scenes()
    random.Random(seed).shuffle(scenes)
    return [(scenes[i % len(scenes)], seed * 100_003 + i) for i in range(n)]


class GroundTruthSource:
    """The clip generator itself, shaped like the model's output (every frame drawn on the model's native canvas,
    shapes' borders as soft as the model learns them, resized to the request)."""

    def __init__(self, model_dir: Path = DEFAULT_MODEL) -> None:
        from studio.engine.frames import resize_frames
        from studio.smallmodel.clips import render_scenes
        from studio.smallmodel.pipeline import OmniSmallT2VPipeline

        self._resize, self._render = resize_frames, render_scenes
        config = OmniSmallT2VPipeline.load_config(model_dir)
        self._pipe = OmniSmallT2VPipeline(
            None, None, None, **{k: v for k, v in config.items() if k.startswith(("native_", "draw_"))}
        )

    def generate(
        self, scene: Scene, width: int, height: int, frames: int, seed: int
    ) -> tuple[np.ndarray, tuple[int, int]]:
        nw, nh = self._pipe.native_size(width, height)
        # The model learns borders one pixel of its native canvas wide, as the renderer draws them there.
        video, _ = self._render([scene], nw, nh, frames, seed=seed, variety="canonical")
        array = (video[0].numpy() * 255.0 + 0.5).astype(np.uint8)
        return self._resize(array, width, height), (nw, nh)


class RunnerSource:
    """Any diffusers pipeline dir through the engine's VideoGenerator, as the studio runs it."""

    def __init__(self, model: str, device: str, threads: int | None, steps: int, guidance: float) -> None:
        import studio.smallmodel  # noqa: F401  registers OmniSmallT2VPipeline with diffusers
        from studio.engine.generation_types import GenerationParams
        from studio.engine.generator import VideoGenerator

        self._params = GenerationParams
        self.runner = VideoGenerator(model, device=device, threads=threads)
        self.runner.load()
        self.steps, self.guidance = steps, guidance

    def generate(
        self, scene: Scene, width: int, height: int, frames: int, seed: int
    ) -> tuple[np.ndarray, tuple[int, int]]:
        params = self._params(
            prompt=scene.prompt,
            width=width,
            height=height,
            num_frames=frames,
            num_inference_steps=self.steps,
            guidance_scale=self.guidance,
            seed=seed,
        )
        output = self.runner.generate(params)
        # The frames come at the requested size (the runner resizes); native_size is what the model made.
        return output.frames, output.native_size


def mp4_round_trip(frames: np.ndarray, fps: int = 24, threads: int = 0) -> np.ndarray:
    """Encode uint8 frames as the engine does (H.264 yuv420p, CRF 18) and decode them again."""
    from studio.media import encode_mp4, read_frames

    with tempfile.TemporaryDirectory(prefix="omni-quality-") as tmp:
        path = Path(tmp) / "clip.mp4"
        encode_mp4(frames, fps, path, threads=threads)
        return read_frames(path)


def evaluate(
    model: str = str(DEFAULT_MODEL),
    prompts: int = 100,
    seed: int = 0,
    steps: int = tiers.DEFAULT_STEPS,
    guidance: float = tiers.DEFAULT_GUIDANCE,
    frames: int = 33,
    tier: str = "256p",
    aspects: tuple[str, ...] = ("16:9",),
    device: str = "cpu",
    threads: int | None = None,
    progress: bool = False,
    through_mp4: bool = True,
) -> Report:
    source = GroundTruthSource() if model == GROUND_TRUTH else RunnerSource(model, device, threads, steps, guidance)
    items: list[Item] = []
    for index, (scene, clip_seed) in enumerate(pick_prompts(prompts, seed)):
        aspect = aspects[index % len(aspects)]
        width, height = tiers.size_for(tier, aspect)
        started = time.perf_counter()
        video, made = source.generate(scene, width, height, frames, clip_seed)
        seconds = time.perf_counter() - started
        if through_mp4:  # what a user gets: H.264 at the engine's quality, decoded again
            video = mp4_round_trip(video, threads=threads or 0)
        reading = read_video(video)
        pieces_ok = sum(p == scene.count for p in reading.pieces)
        item = Item(
            prompt=scene.prompt,
            seed=clip_seed,
            aspect=aspect,
            truth=asdict(scene),
            color=reading.color,
            motion=reading.motion,
            count=reading.count,
            shape=reading.shape,
            pieces=reading.pieces,
            color_ok=reading.color == scene.color,
            motion_ok=reading.motion == scene.motion,
            count_ok=reading.count == scene.count,
            shape_ok=reading.shape == scene.shape,
            pieces_ok=pieces_ok,
            native_size=f"{made[0]}x{made[1]}",
            seconds=round(seconds, 3),
            details=reading.details,
        )
        items.append(item)
        if progress:
            marks = "".join("+" if ok else "-" for ok in (item.color_ok, item.motion_ok, item.count_ok, item.shape_ok))
            print(
                f"[{index + 1:4d}/{prompts}] {marks} {scene.prompt!r}: {reading.color} {reading.motion} "
                f"x{reading.count} {reading.shape}, pieces right in {pieces_ok}/{len(reading.pieces)} frames "
                f"({seconds:.2f} s)",
                file=sys.stderr,
                flush=True,
            )
    by_motion: dict[str, list[bool]] = defaultdict(list)
    by_shape: dict[str, list[bool]] = defaultdict(list)
    for item in items:
        by_motion[item.truth["motion"]].append(item.motion_ok)
        by_shape[item.truth["shape"]].append(item.shape_ok)
    n = max(1, len(items))
    return Report(
        model=model,
        prompts=len(items),
        seed=seed,
        steps=steps,
        guidance=guidance,
        frames=frames,
        tier=tier,
        aspects=list(aspects),
        color_accuracy=sum(i.color_ok for i in items) / n,
        direction_accuracy=sum(i.motion_ok for i in items) / n,
        count_accuracy=sum(i.count_ok for i in items) / n,
        shape_accuracy=sum(i.shape_ok for i in items) / n,
        shape_by_shape={k: sum(v) / len(v) for k, v in by_shape.items()},
        pieces_accuracy=sum(i.pieces_ok for i in items) / max(1, sum(len(i.pieces) for i in items)),
        direction_by_motion={k: sum(v) / len(v) for k, v in by_motion.items()},
        median_generate_s=statistics.median(i.seconds for i in items) if items else 0.0,
        through_mp4=through_mp4,
        items=items,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help=f"model dir, or {GROUND_TRUTH!r}")
    parser.add_argument("--prompts", type=int, default=100, help="how many held-out prompts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=tiers.DEFAULT_STEPS)
    parser.add_argument("--guidance", type=float, default=tiers.DEFAULT_GUIDANCE)
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--tier", default="256p", choices=tiers.TIERS)
    parser.add_argument("--aspect", default="16:9", help="an aspect, or several comma-separated (cycled)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no per-prompt lines")
    parser.add_argument("--no-mp4", action="store_true", help="read the frames as made, without the mp4 round trip")
    args = parser.parse_args(argv)
    aspects = tuple(a.strip() for a in args.aspect.split(",") if a.strip())
    for aspect in aspects:
        tiers.size_for(args.tier, aspect)
    report = evaluate(
        model=args.model,
        prompts=args.prompts,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        frames=tiers.round_frames(args.frames),
        tier=args.tier,
        aspects=aspects,
        device=args.device,
        threads=args.threads,
        progress=not args.quiet,
        through_mp4=not args.no_mp4,
    )
    print(report.summary())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = asdict(report)
        payload["native_sizes"] = dict(Counter(i.native_size for i in report.items))
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
