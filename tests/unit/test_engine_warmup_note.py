"""How the Server view words a serving engine's own warm-up (studio.backend.servers.warmup.warmup_note)."""

from __future__ import annotations

from studio.backend.servers.warmup import warmup_note


def test_a_warm_up_under_way_names_its_runs_and_one_over_says_nothing() -> None:
    state = {"complete": False, "runs_done": 3, "runs_total": 8, "failed": None}
    assert warmup_note(state) == "warming larger batches (3 of 8 runs)"
    assert warmup_note({**state, "complete": True}) is None
    assert warmup_note(None) is None  # a server that reports no warm-up (vLLM-Omni)


def test_a_failed_warm_up_run_says_its_batches_stay_smaller() -> None:
    state = {"complete": False, "runs_done": 3, "runs_total": 8, "failed": "RuntimeError: out of memory"}
    assert warmup_note(state) == "a warm-up run failed: its batches stay smaller"
