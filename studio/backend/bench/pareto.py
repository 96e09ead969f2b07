"""Which fleet to run: the Pareto set of p90 latency vs throughput per device, and one recommendation per tier.

Works on the bench's summary rows (CellResult.row()): each row one cell of one fleet (layout x variant) at one
concurrency. Cells of one tier (and guardrails setting) compare with each other only: a 720p video is not a
256p one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from studio.backend.bench.doubt import doubt

Row = dict[str, Any]


def group_of(row: Row) -> str:
    """The workload a cell measured: its tier, and its guardrails where they were off."""
    return row["tier"] if row.get("guardrails", True) else f"{row['tier']} guardrails off"


def cell_name(row: Row) -> str:
    """A cell in a few words: "2x1 base c=4"."""
    return f"{row['layout']} {row['variant']} c={row['concurrency']}"


def _measured(row: Row) -> bool:
    return bool(row.get("completed")) and row.get("latency_p90_s") is not None


def pareto_front(rows: Sequence[Row]) -> list[Row]:
    """The cells no other cell beats on both counts (more videos/min per device, lower p90), by throughput."""
    points = [r for r in rows if _measured(r) and r.get("videos_per_min_per_device") is not None]

    def beats(a: Row, b: Row) -> bool:
        more, lower = a["videos_per_min_per_device"], a["latency_p90_s"]
        theirs, their_p90 = b["videos_per_min_per_device"], b["latency_p90_s"]
        return more >= theirs and lower <= their_p90 and (more > theirs or lower < their_p90)

    front = [r for r in points if not any(beats(other, r) for other in points if other is not r)]
    return sorted(front, key=lambda r: r["videos_per_min_per_device"])


def fronts(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The Pareto set of each tier (group), in the rows' order of groups."""
    groups = list(dict.fromkeys(group_of(r) for r in rows))
    return {group: pareto_front([r for r in rows if group_of(r) == group]) for group in groups}


@dataclass(frozen=True)
class Recommendation:
    """The fleet a tier should run, and the figures that decided."""

    group: str
    row: Row | None  # the chosen cell; None where no cell completed a request
    within_slo: bool  # its p90 is within the SLO (always, where no SLO was given)
    why: str
    uncertain: str | None = None  # why it may not beat the runner-up (doubt.py); None: clearly ahead

    def line(self) -> str:
        if self.row is None:
            return f"{self.group}: {self.why}"
        r = self.row
        per = r.get("videos_per_min_per_device")
        per_text = f", {per:.2f} per {r['device_kind']}" if per is not None else ""
        return (
            f"{self.group}: layout {r['layout']}, variant {r['variant']}, at concurrency {r['concurrency']}: "
            f"{r['videos_per_min'] or 0:.2f} videos/min{per_text}, p90 {r['latency_p90_s']:.2f} s. {self.why}"
            + (f" uncertain: {self.uncertain}." if self.uncertain else "")
        )

    def as_dict(self) -> dict[str, Any]:
        keys = ("layout", "replicas", "width", "variant", "concurrency", "videos_per_min")
        chosen = {key: self.row.get(key) for key in keys} if self.row else {}
        if self.row:
            chosen["videos_per_min_per_device"] = self.row.get("videos_per_min_per_device")
            chosen["latency_p90_s"] = self.row.get("latency_p90_s")
        doubted = {"uncertain": self.uncertain} if self.uncertain else {}  # a clear winner's record is as it was
        return {"tier": self.group, **chosen, "within_slo": self.within_slo, "why": self.why, **doubted}


def _runner_up(rows: Sequence[Row], chosen: Row, key: str, reverse: bool) -> Row | None:
    others = sorted((r for r in rows if r is not chosen), key=lambda r: r[key] or 0.0, reverse=reverse)
    return others[0] if others else None


def _next(other: Row | None) -> str:
    if other is None:
        return ""
    return (
        f" Next: {cell_name(other)}, {other['videos_per_min'] or 0:.2f} videos/min, p90 {other['latency_p90_s']:.2f} s."
    )


def _doubt(best: Row, other: Row | None, key: str) -> str | None:
    return None if other is None else doubt(best, other, key, (cell_name(best), cell_name(other)))


def recommend_group(group: str, rows: Sequence[Row], slo_s: float | None) -> Recommendation:
    """The most videos/min whose p90 stays within the SLO (every request of the cell done); where none does,
    the lowest p90."""
    measured = [r for r in rows if _measured(r)]
    if not measured:
        return Recommendation(group, None, False, "no cell completed a request")
    within = [r for r in measured if not r.get("failed") and (slo_s is None or r["latency_p90_s"] <= slo_s)]
    if within:
        best = max(within, key=lambda r: (r["videos_per_min"] or 0.0, -r["latency_p90_s"]))
        slo = f"p90 within the {slo_s:g} s SLO" if slo_s is not None else "no SLO given, so every cell"
        why = f"The most videos/min of the {len(within)} of {len(measured)} cells with {slo}."
        other = _runner_up(within, best, "videos_per_min", reverse=True)
        return Recommendation(group, best, True, why + _next(other), _doubt(best, other, "videos_per_min"))
    best = min(measured, key=lambda r: (r["latency_p90_s"], -(r["videos_per_min"] or 0.0)))
    why = (
        f"No cell keeps p90 within the {slo_s:g} s SLO with every request done: this is the lowest p90 of "
        f"{len(measured)} cells; add GPUs, a lower tier or a faster variant to meet it."
    )
    other = _runner_up(measured, best, "latency_p90_s", reverse=False)
    return Recommendation(group, best, False, why + _next(other), _doubt(best, other, "latency_p90_s"))


def recommend(rows: Sequence[Row], slo_s: float | None) -> list[Recommendation]:
    """One recommendation per tier (group), in the rows' order of groups."""
    groups = list(dict.fromkeys(group_of(r) for r in rows))
    return [recommend_group(group, [r for r in rows if group_of(r) == group], slo_s) for group in groups]
