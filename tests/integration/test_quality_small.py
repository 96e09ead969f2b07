"""CI's cut of the quality benchmark: the shipped small model on held-out prompts, through the engine's runner
and an mp4 round trip, exactly as benchmarks/cpu/quality.py measures it (there on 224 prompts; RESULTS.md).

20 prompts at the engine's defaults (256p 16:9, 33 frames, 35 steps), seeded, so the result is the same on every
run on one torch build; the bounds are the model's bars (color 95%, direction 85%, count 90%, each shape 90% of
its videos, 95% of frames with as many pieces as objects), so a change that breaks prompt following (the model,
the pipeline, the runner's resize, the encoder, the reader) fails.
"""

from __future__ import annotations

import pytest

from benchmarks.cpu.quality import GROUND_TRUTH, evaluate
from studio.config import SMALL_MODEL_DIR, TINY_WAN_DIR

COLOR_BOUND = 0.95
DIRECTION_BOUND = 0.85
COUNT_BOUND = 0.90
SHAPE_BOUND = 0.90  # for each shape
PIECES_BOUND = 0.95  # share of frames


def test_reader_agrees_with_the_clip_generator():
    report = evaluate(model=GROUND_TRUTH, prompts=20, seed=1)
    assert report.color_accuracy == report.direction_accuracy == report.count_accuracy == 1.0
    assert report.shape_accuracy == report.pieces_accuracy == 1.0
    assert set(report.shape_by_shape) == {"circle", "square", "triangle", "diamond"}


@pytest.mark.timeout(240)
def test_small_model_follows_held_out_prompts():
    assert (SMALL_MODEL_DIR / "model_index.json").is_file(), "the trained model is missing from assets/"
    report = evaluate(model=str(SMALL_MODEL_DIR), prompts=20, seed=1, threads=1)
    print(report.summary())
    assert report.color_accuracy >= COLOR_BOUND, report.summary()
    assert report.direction_accuracy >= DIRECTION_BOUND, report.summary()
    assert report.count_accuracy >= COUNT_BOUND, report.summary()
    assert min(report.shape_by_shape.values()) >= SHAPE_BOUND, report.summary()
    assert report.pieces_accuracy >= PIECES_BOUND, report.summary()
    assert {item.native_size for item in report.items} == {"80x48"}


@pytest.mark.timeout(240)
def test_random_weights_baseline_does_not_pass():
    """The evaluator can fail: the random-weight model it replaced scores far below the bounds."""
    report = evaluate(model=str(TINY_WAN_DIR), prompts=3, seed=1, steps=2, threads=1)
    assert report.color_accuracy < COLOR_BOUND and report.direction_accuracy < DIRECTION_BOUND
