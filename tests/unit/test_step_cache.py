"""The step cache's fixed schedule and its estimates of the skipped steps' predictions."""

from __future__ import annotations

import pytest
import torch

from studio.engine.step_cache import StepCache, StepCacheMode, StepCachePolicy, parse_policy


def test_off_computes_every_step():
    assert StepCachePolicy().computed(20) == [True] * 20
    assert not StepCachePolicy(StepCacheMode.REUSE, interval=1).active


def test_the_schedule_keeps_the_first_and_last_steps_and_skips_between():
    plan = StepCachePolicy(StepCacheMode.REUSE, interval=2, warm_fraction=0.2, final_steps=1).computed(20)
    assert plan[:4] == [True] * 4 and plan[-1]
    assert plan[4:19] == [False, True] * 7 + [False]
    assert sum(plan) == 12
    assert sum(StepCachePolicy(StepCacheMode.TAYLOR, interval=3).computed(50)) < 50 * 0.5


def test_reuse_holds_and_taylor_follows_the_line():
    policy = StepCachePolicy(StepCacheMode.TAYLOR, interval=2)
    cache = StepCache(policy, 10)
    cache.keep(900.0, torch.full((2,), 1.0))
    cache.keep(800.0, torch.full((2,), 2.0))
    assert torch.allclose(cache.estimate(700.0), torch.full((2,), 3.0))  # the line through both
    held = StepCache(StepCachePolicy(StepCacheMode.REUSE, interval=2), 10)
    held.keep(900.0, torch.full((2,), 1.0))
    held.keep(800.0, torch.full((2,), 2.0))
    assert torch.equal(held.estimate(700.0), torch.full((2,), 2.0))


def test_a_cache_computes_until_it_has_something_to_reuse():
    cache = StepCache(StepCachePolicy(StepCacheMode.REUSE, interval=2, warm_fraction=0.0, final_steps=0), 6)
    assert cache.plan[:2] == [True, True]  # at least two, whatever the fraction
    assert cache.computes(0)


def test_names_are_checked():
    assert parse_policy("TAYLOR").mode is StepCacheMode.TAYLOR
    with pytest.raises(ValueError, match="step cache must be one of off, reuse, taylor"):
        parse_policy("teacache")
    with pytest.raises(ValueError, match="interval must be at least 1"):
        StepCachePolicy(StepCacheMode.REUSE, interval=0)
