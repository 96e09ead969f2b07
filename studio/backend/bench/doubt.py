"""Whether a recommendation's winner is clearly ahead of its runner-up, or only as far as this run of the bench goes.

Two reasons to doubt it: the winner's 95% interval overlaps the runner-up's on the figure it was ranked by (another
run of the same cells could swap them: spread.py), or the two cells ran under clearly different load from the rest
of the machine (load.py), so that their figures measure the machine as much as the setting.
"""

from __future__ import annotations

from typing import Any

from studio.backend.bench.spread import interval_of

# Two cells ran under clearly different load where the CPU used by work other than the bench's own (the machine's
# use less the studio's and its servers') differs by this many points of the whole machine: a quarter of its
# cores. On a small CPU that is a core or more taken from the engine's threads, enough to move its step time by
# far more than a cell's own spread; below it the difference is within what the samples themselves move (a
# second's period, the studio's own threads waking, the load of the cell before fading out).
LOAD_GAP_POINTS = 25.0

FIGURE_WORDS = {"latency_p50_s": "p50", "latency_p90_s": "p90", "videos_per_min": "videos/min"}


def doubt(winner: dict[str, Any], runner_up: dict[str, Any], figure: str, names: tuple[str, str]) -> str | None:
    """Why the winner (a report row) may not beat the runner-up on `figure` (a key of spread.INTERVAL_COLUMNS), in
    words; None where nothing says so. `names`: the two cells in a few words."""
    reasons = []
    mine, theirs = interval_of(winner, figure), interval_of(runner_up, figure)
    if mine is not None and theirs is not None and mine.overlaps(theirs):
        digits = 1 if figure == "videos_per_min" else 2
        reasons.append(
            f"{names[0]}'s {FIGURE_WORDS[figure]} 95% interval ({mine.low:.{digits}f}–{mine.high:.{digits}f}) "
            f"overlaps {names[1]}'s ({theirs.low:.{digits}f}–{theirs.high:.{digits}f})"
        )
    load, other = winner.get("other_cpu_percent"), runner_up.get("other_cpu_percent")
    if load is not None and other is not None and abs(load - other) >= LOAD_GAP_POINTS:
        reasons.append(
            f"other work used {load:.0f}% of the machine's CPU during {names[0]} and {other:.0f}% during {names[1]}"
        )
    return "; ".join(reasons) or None
