"""Warm-up before serving: each size at each batch size requests will run at, so that no request waits for a
compile; then the CUDA graphs of the shapes seen, and one replay of each size. A warm-up that fails on a GPU
turns compile and the attention backend off rather than fail requests later. What it compiled and picked is
then kept in the compile cache, for the next start."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from studio.engine.generation import BatchItem, GenerationParams, raise_if_error
from studio.engine.vae_decode import (
    decode_chunk,
    decode_group_sizes,
    pick_vae_memory_format,
)

if TYPE_CHECKING:
    from studio.engine.generator import VideoGenerator

log = logging.getLogger(__name__)

# Steps of a warm-up run: enough for the scheduler's second-order updates to run once.
WARMUP_STEPS = 4
# Prompts of the warm-up runs start so; their embeddings are dropped from the cache after it.
WARMUP_PROMPT = "warm-up"


def parse_sizes(text: str) -> list[tuple[int, int, int]]:
    """`"320x192x33,832x480x33"` -> [(320, 192, 33), (832, 480, 33)] (width x height x frames)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            width, height, frames = (int(value) for value in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"a warm-up size looks like WIDTHxHEIGHTxFRAMES (e.g. 320x192x33), got {part!r}") from None
        sizes.append((width, height, frames))
    return sizes


def warm_up(generator: VideoGenerator, sizes: Sequence[tuple[int, int, int]], max_batch: int = 1) -> dict[str, float]:
    """Run on the generator's device thread; returns the seconds each run took, by name."""
    if not generator.batched_loop:
        return {}
    generator.set_max_batch(max_batch)
    gpu = generator.gpu
    generator.record_shapes()
    if generator.device == "cuda" and sizes:
        layout = generator.vae_channels_last  # picked by an earlier start here (the compile cache) or warm-up
        if layout is None:
            width, height, frames = max(sizes, key=lambda size: size[0] * size[1] * size[2])
            layout = pick_vae_memory_format(generator.pipe, *generator.native_size(width, height), frames)
        generator.set_vae_layout(layout)  # on every rank: each decodes a strip of the frames
    for width, height, frames in sizes:
        batches = set(generator.buckets.sizes) if gpu.static_shapes else {1, max_batch}
        native_w, native_h = generator.native_size(width, height)
        chunk = decode_chunk(frames, native_w, native_h)
        batches |= {size for size in decode_group_sizes(max_batch, chunk)}
        for batch in sorted(size for size in batches if size <= max_batch):
            items = [
                BatchItem(GenerationParams(f"{WARMUP_PROMPT} {i}", width, height, frames, WARMUP_STEPS, 5.0, seed=i))
                for i in range(batch)
            ]
            started = time.perf_counter()
            try:
                generator.generate_batch(items, lambda _i, result: raise_if_error(result))
            except Exception as exc:
                if generator.device != "cuda" or (gpu.compile == "off" and gpu.attention_backend is None):
                    raise
                # A kernel or compile that fails here would fail requests: serve eager, default attention.
                log.warning("warm-up failed (%s: %s); compile and attention backend off", type(exc).__name__, exc)
                generator.fall_back_to_eager()
                generator.generate_batch(items, lambda _i, result: raise_if_error(result))
            if generator.device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            generator.warmup_seconds[f"{width}x{height}x{frames} batch {batch}"] = round(seconds, 2)
            log.info("warm-up %dx%dx%d batch %d: %.1f s", width, height, frames, batch, seconds)
    if gpu.graphs is not None:
        started = time.perf_counter()
        captured = generator.capture_graphs()
        generator.warmup_seconds["cuda graphs"] = round(time.perf_counter() - started, 2)
        log.info("CUDA graphs of the transformer: %d, captured in %.1f s", captured, time.perf_counter() - started)
        if captured:
            _replay_once(generator, sizes)
    # The empty negative prompt stays: most requests use it.
    generator.forget_prompts(f"{WARMUP_PROMPT} ")
    generator.save_compile_cache()
    return dict(generator.warmup_seconds)


def _replay_once(generator: VideoGenerator, sizes: Sequence[tuple[int, int, int]]) -> None:
    """One request of each size through the captured graphs before serving: whatever a graph's first replays
    still cost is paid here, not by the first user."""
    for width, height, frames in sizes:
        started = time.perf_counter()
        params = GenerationParams(f"{WARMUP_PROMPT} replay", width, height, frames, WARMUP_STEPS, 5.0, seed=0)
        output = generator.generate(params)
        torch.cuda.synchronize()
        stages = {k: round(v, 3) for k, v in output.stage_durations.items()}
        seconds = round(time.perf_counter() - started, 2)
        generator.warmup_seconds[f"{width}x{height}x{frames} replay"] = seconds
        log.info("warm-up replay %dx%dx%d: %.2f s %s", width, height, frames, seconds, stages)
