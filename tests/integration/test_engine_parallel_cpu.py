"""One request on two ranks on the CPU: the engine's cfg-parallel and Ulysses paths over gloo, on the tiny Wan.

The engine (this test's process, rank 0) starts its second rank as a process of its own, which joins on
127.0.0.1 at a free port. The frames must equal the one-rank engine's for the same seeds, with the work really
split (half the rows, or a share of the tokens, on rank 0); cancellation keeps the ranks in step; a lost rank
fails the next request at once instead of hanging it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from studio.config import TINY_WAN_DIR
from studio.engine.generation_types import BatchItem, GenerationCancelled, GenerationParams, ModelLoadError
from studio.engine.generator import VideoGenerator
from studio.engine.parallel import ParallelSettings, RankLayout
from studio.engine.parallel.leader import FollowerLost
from studio.engine.parallel.sequence import TokenShares, UlyssesWanAttnProcessor
from studio.engine.parallel.split_decode import decoder_halo
from studio.engine.step_cache import StepCacheMode, StepCachePolicy
from tests.waiting import wait_for

# 48x16 at 9 frames: 3 latent frames of 3x1 patches, 9 tokens: two ranks hold 5 and 4 (an uneven split).
UNEVEN = {"width": 48, "height": 16, "num_frames": 9}
EVEN = {"width": 32, "height": 32, "num_frames": 5}  # 2 latent frames of 2x2 patches: 8 tokens
# Ranks wait at most this long for each other here (the engine's default is for GPUs that compile).
TIMEOUTS = {"start_timeout_s": 60.0, "collective_timeout_s": 60.0}


def params(seed: int, steps: int = 3, size: dict | None = None, **changes: object) -> GenerationParams:
    values = {
        **(size or UNEVEN),
        "prompt": f"a red circle moving left {seed}",
        "num_inference_steps": steps,
        "guidance_scale": 5.0,
        "seed": seed,
        **changes,
    }
    return GenerationParams(**values)


def run_batch(generator: VideoGenerator, requests: list[GenerationParams], **item_options: object) -> dict:
    results: dict[int, object] = {}
    items = [BatchItem(p, **item_options) for p in requests]
    generator.generate_batch(items, results.__setitem__)
    return results


def spread_generator(cfg: int, ulysses: int, split_decode: bool = True) -> VideoGenerator:
    parallel = ParallelSettings(cfg, ulysses, split_decode=split_decode, **TIMEOUTS)
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1, parallel=parallel)
    generator.load()
    return generator


@pytest.fixture(scope="module")
def single() -> VideoGenerator:
    generator = VideoGenerator(str(TINY_WAN_DIR), device="cpu", threads=1)
    generator.load()
    return generator


@pytest.fixture(
    scope="module",
    params=[(2, 1, True), (1, 2, True), (2, 1, False)],
    ids=["cfg-parallel-2", "ulysses-2", "cfg-parallel-2-leader-decodes"],
)
def spread(request: pytest.FixtureRequest) -> Iterator[VideoGenerator]:
    generator = spread_generator(*request.param)
    followers = generator.rank.followers
    yield generator
    generator.close()
    assert not any(process.is_alive() for process in followers.processes)  # close stops the other rank


def test_frames_equal_the_one_rank_engine(spread: VideoGenerator, single: VideoGenerator) -> None:
    requests = [params(11), params(12, negative_prompt="blurry")]
    expected = run_batch(single, requests)
    steps: list[int] = []
    got = run_batch(spread, requests, on_step=lambda done, _total: steps.append(done))
    for i in range(len(requests)):
        difference = np.abs(got[i].frames.astype(int) - expected[i].frames.astype(int))
        assert difference.max() <= 1 and difference.mean() < 0.01
    assert np.abs(got[0].frames.astype(int) - got[1].frames.astype(int)).mean() > 1  # different seeds, prompts
    assert steps == [1, 1, 2, 2, 3, 3]  # progress of each request, step by step
    # A second shape (an even split of the tokens) on the same ranks.
    even = params(13, size=EVEN)
    difference = np.abs(spread.generate(even).frames.astype(int) - single.generate(even).frames.astype(int))
    assert difference.max() <= 1 and difference.mean() < 0.01


def test_a_step_cache_skips_the_same_steps_on_every_rank(spread: VideoGenerator, single: VideoGenerator) -> None:
    """The step cache on ranks: every rank skips the transformer at the same steps (a rank that ran it alone would
    wait in its collectives for ever), and the frames equal the one-rank engine's with the same cache."""
    policy = StepCachePolicy(StepCacheMode.TAYLOR, interval=3)
    assert policy.computed_count(8) < 8
    cached = params(71, steps=8, step_cache=policy)
    forwards: list[int] = []
    handle = spread.pipe.transformer.register_forward_pre_hook(lambda _m, _a: forwards.append(1))
    try:
        got = spread.generate(cached)
    finally:
        handle.remove()
    assert len(forwards) == policy.computed_count(8)
    expected = single.generate(cached)
    difference = np.abs(got.frames.astype(int) - expected.frames.astype(int))
    assert difference.max() <= 1 and difference.mean() < 0.01
    exact = single.generate(params(71, steps=8))
    assert np.abs(exact.frames.astype(int) - expected.frames.astype(int)).max() > 1  # the cache changed the video


def test_each_rank_runs_its_share(spread: VideoGenerator) -> None:
    """Rank 0's transformer sees one guidance half (its rows), or its share of the tokens (its blocks)."""
    transformer = spread.pipe.transformer
    rows: list[int] = []
    tokens: list[int] = []
    handles = [
        transformer.register_forward_pre_hook(
            lambda _m, args, kwargs: rows.append(kwargs["hidden_states"].shape[0]), with_kwargs=True
        ),
        transformer.blocks[1].register_forward_pre_hook(lambda _m, args: tokens.append(args[0].shape[1])),
    ]
    try:
        run_batch(spread, [params(21), params(22)])
    finally:
        for handle in handles:
            handle.remove()
    layout = spread.rank.layout
    if layout.cfg_size == 2:
        assert set(rows) == {2} and set(tokens) == {9}  # 2 requests: their conditional rows only, every token
    else:
        assert set(rows) == {4} and set(tokens) == {5}  # both halves; 5 of the 9 tokens
        assert all(isinstance(block.attn1.processor, UlyssesWanAttnProcessor) for block in transformer.blocks)


def test_each_rank_decodes_a_strip(spread: VideoGenerator, single: VideoGenerator) -> None:
    """At 512x16 (64 latent columns) rank 0's VAE up blocks see its strip with the halo, not the whole width,
    where the ranks split the decode; the frames still equal the one-rank engine's."""
    widths: list[int] = []
    handle = spread.pipe.vae.decoder.up_blocks[0].register_forward_pre_hook(
        lambda _m, args: widths.append(args[0].shape[-1])
    )
    wide = params(51, steps=2, size={"width": 512, "height": 16, "num_frames": 5})
    try:
        got = spread.generate(wide)
    finally:
        handle.remove()
    expected = single.generate(wide)
    difference = np.abs(got.frames.astype(int) - expected.frames.astype(int))
    assert difference.max() <= 1 and difference.mean() < 0.01
    if spread.rank.splits_decode:
        assert set(widths) == {32 + decoder_halo(spread.pipe.vae.decoder)}  # its 32 columns and the halo
    else:
        assert set(widths) == {64}


def test_cancel_keeps_the_ranks_in_step(spread: VideoGenerator, single: VideoGenerator) -> None:
    steps: list[int] = []
    results = run_batch(
        spread, [params(31, steps=6)], on_step=lambda done, _total: steps.append(done), should_stop=lambda: bool(steps)
    )
    assert isinstance(results[0], GenerationCancelled) and steps == [1]
    # The other rank stopped with rank 0: the next request runs in step and makes the same video.
    after = params(32)
    difference = np.abs(spread.generate(after).frames.astype(int) - single.generate(after).frames.astype(int))
    assert difference.max() <= 1


def test_a_lost_rank_fails_the_next_request_at_once(spread: VideoGenerator) -> None:
    """The last test of each engine (pytest runs a module's tests in file order for each engine): it ends it."""
    follower = spread.rank.followers.processes[0]
    follower.kill()
    follower.join(10)
    wait_for(  # the engine's watcher notices the exit by itself
        lambda: spread.rank.followers.lost is not None, "the engine to notice that rank 1 is lost", 10, poll_s=0.01
    )
    started = time.monotonic()
    with pytest.raises(FollowerLost, match="rank 1 exited"):
        spread.generate(params(41))
    assert time.monotonic() - started < 5


def test_one_engine_across_ranks_per_process(spread: VideoGenerator) -> None:
    with pytest.raises(ModelLoadError, match="one per process"):
        spread_generator(2, 1)


def test_rank_layout_of_guidance_and_sequence_groups() -> None:
    """cfg 2 x ulysses 2 on four ranks: a sequence group per guidance half, a guidance group per token share."""
    layouts = [RankLayout(2, 2, rank) for rank in range(4)]
    assert [(lay.cfg_rank, lay.ulysses_rank) for lay in layouts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert layouts[0].sequence_groups() == [[0, 1], [2, 3]]
    assert layouts[0].guidance_groups() == [[0, 2], [1, 3]]
    assert layouts[0].is_leader and not layouts[3].is_leader
    with pytest.raises(ValueError):
        RankLayout(2, 2, 4)
    with pytest.raises(ValueError):
        ParallelSettings(cfg_parallel_size=3)
    assert TokenShares(9, 2).sizes() == [5, 4] and TokenShares(9, 2).bounds(1) == (5, 9)
    assert TokenShares(10, 4).sizes() == [3, 3, 2, 2] and TokenShares(10, 4).longest == 3
