"""CI's cut of the quality benchmark: the shipped small model on held-out prompts, through the engine's runner
and an mp4 round trip, exactly as benchmarks/quality.py measures it (there on 224 prompts; RESULTS.md).

20 prompts at the engine's defaults (256p 16:9, 33 frames, 35 steps), seeded, so the result is the same on every
run on one torch build; the bounds sit a little below the full run's figures, so a change that breaks prompt
following (the model, the pipeline, the runner's resize, the encoder, the reader) fails.
"""

from __future__ import annotations

import pytest

from benchmarks.quality import GROUND_TRUTH, evaluate
from studio.config import SMALL_MODEL_DIR, TINY_WAN_DIR

pytestmark = pytest.mark.integration

COLOR_BOUND = 0.90
DIRECTION_BOUND = 0.75
COUNT_BOUND = 0.70


def test_reader_agrees_with_the_clip_generator():
    report = evaluate(model=GROUND_TRUTH, prompts=20, seed=1)
    assert report.color_accuracy == report.direction_accuracy == report.count_accuracy == 1.0


@pytest.mark.timeout(240)
def test_small_model_follows_held_out_prompts():
    assert (SMALL_MODEL_DIR / "model_index.json").is_file(), "the trained model is missing from assets/"
    report = evaluate(model=str(SMALL_MODEL_DIR), prompts=20, seed=1, threads=1)
    print(report.summary())
    assert report.color_accuracy >= COLOR_BOUND, report.summary()
    assert report.direction_accuracy >= DIRECTION_BOUND, report.summary()
    assert report.count_accuracy >= COUNT_BOUND, report.summary()
    assert {item.native_size for item in report.items} == {"40x24"}


@pytest.mark.timeout(240)
def test_random_weights_baseline_does_not_pass():
    """The evaluator can fail: the random-weight model it replaced scores far below the bounds."""
    report = evaluate(model=str(TINY_WAN_DIR), prompts=6, seed=1, steps=2, threads=1)
    assert report.color_accuracy < COLOR_BOUND and report.direction_accuracy < DIRECTION_BOUND
