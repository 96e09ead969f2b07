"""Fidelity next to speed: what a variant (fp8, a step cache) does to the videos, beside what it does to latency.

Every fleet's cells send the same requests: the same prompts in turn and seeds counting up from the bench's own
(runner.cell_spec), so each video of a variant has a twin in the baseline's fleet of the same layout: the same cell,
prompt, seed and shape. Each twin pair is compared frame by frame (fidelity.py); the report gets the figures per
cell (a column of the summary) and per fleet (`fidelity` in report.json), and says what lossy encoding alone moves.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.backend.bench.fidelity import Difference, VideoComparison, compare_videos, reencode_difference
from studio.backend.bench.variants import Variant, baseline_variant
from studio.backend.runs.request_state import RequestState, RequestView

if TYPE_CHECKING:
    from studio.backend.bench.cells import CellResult
    from studio.backend.bench.fleets import Fleet

# The summary's column, as the report's cells name it, and its figures, each a key of its own.
COLUMN = "vs_baseline"
FIGURE_KEYS = ("vs_baseline_compared", "vs_baseline_mean_levels", "vs_baseline_max_levels", "vs_baseline_psnr_db")
METHOD = (
    "each video of a variant against the baseline's video of the same layout, cell, prompt, seed and shape, decoded "
    "to RGB frame by frame where sizes and frame counts match: mean_levels is the mean over videos of each one's mean "
    "absolute difference in uint8 levels, max_levels the largest difference anywhere, psnr_median_db the median over "
    "videos of each one's PSNR (null where that median is infinite: identical videos)"
)
BOUND = (
    "both sides are lossy H.264 mp4s, so a variant that computes the same frames may still differ by a few levels: "
    "'reencode' is one baseline video decoded and encoded again as the engines encode (CRF 18), what one encode "
    "alone moves; 'self' is that video against itself (exact: decoding is deterministic)"
)


@dataclass(frozen=True)
class Figures:
    """Video pairs compared, in the report's terms."""

    compared: int
    identical: int
    mean_levels: float | None  # mean of each pair's mean absolute difference
    max_levels: int | None  # max of each pair's largest difference
    psnr_median_db: float | None  # inf where the median pair is identical

    @classmethod
    def of(cls, differences: Sequence[Difference]) -> Figures:
        if not differences:
            return cls(0, 0, None, None, None)
        return cls(
            compared=len(differences),
            identical=sum(d.identical for d in differences),
            mean_levels=statistics.fmean(d.mean_levels for d in differences),
            max_levels=max(d.max_levels for d in differences),
            psnr_median_db=statistics.median(d.psnr_db for d in differences),
        )

    def text(self) -> str:
        """As the summary's column shows it: "mean / max levels, PSNR"."""
        if not self.compared:
            return "none"
        return f"{self.mean_levels:.2f} / {self.max_levels}, {_db(self.psnr_median_db)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "identical": self.identical,
            "mean_levels": self.mean_levels,
            "max_levels": self.max_levels,
            "psnr_median_db": _finite(self.psnr_median_db),
        }


def _db(value: float | None) -> str:
    return "–" if value is None else "inf dB" if math.isinf(value) else f"{value:.1f} dB"


def _finite(value: float | None) -> float | None:
    # JSON has no infinity; the report's readers (a browser's JSON.parse) refuse Python's `Infinity`.
    return None if value is None or math.isinf(value) else value


@dataclass
class Pairing:
    """The videos of one variant cell (or fleet) against the baseline's twins."""

    differences: list[Difference] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    why_none: str | None = None  # nothing of it could be compared (no baseline cell)
    first_baseline: RequestView | None = None  # the baseline video of its first pair compared

    def add(self, other: Pairing) -> None:
        self.differences += other.differences
        self.skipped.update(other.skipped)
        self.requests += other.requests
        self.why_none = self.why_none or other.why_none
        self.first_baseline = self.first_baseline or other.first_baseline

    def text(self) -> str:
        figures = Figures.of(self.differences)
        if not figures.compared:
            reason = self.why_none or next(iter(self.skipped), "no requests")
            return f"none: {reason}"
        part = "" if figures.compared == self.requests else f" ({figures.compared} of {self.requests})"
        return figures.text() + part


def _twin_key(view: RequestView) -> tuple[Any, ...]:
    request = view.request
    return (request.prompt, request.seed, request.width, request.height, request.num_frames)


def _video(view: RequestView) -> Path | None:
    return view.video_path if view.state is RequestState.DONE and view.video_path is not None else None


def pair_cell(cell: CellResult, baseline: CellResult) -> Pairing:
    """Each request of `cell` against the baseline cell's request of the same prompt, seed and shape."""
    twins = {_twin_key(view): view for view in baseline.views}
    pairing = Pairing(requests=len(cell.views))
    for view in cell.views:
        twin = twins.get(_twin_key(view))
        mine, theirs = _video(view), (_video(twin) if twin is not None else None)
        if twin is None:
            pairing.skipped["no baseline request of its prompt and seed"] += 1
        elif mine is None:
            pairing.skipped["not done in the variant"] += 1
        elif theirs is None:
            pairing.skipped["not done in the baseline"] += 1
        else:
            compared = compare_videos(theirs, mine)
            if compared.difference is None:
                pairing.skipped[compared.why_not or "not compared"] += 1
            else:
                pairing.differences.append(compared.difference)
                pairing.first_baseline = pairing.first_baseline or twin
    return pairing


def _cell_key(cell: CellResult) -> tuple[Any, ...]:
    layout = str(cell.fleet.layout) if cell.fleet else None
    return (layout, cell.tier, cell.guardrails, cell.concurrency)


def baseline_of(fleets: Sequence[Fleet]) -> Variant | None:
    """The variant the bench's others are compared with; None where it runs one variant only."""
    variants = list(dict.fromkeys(fleet.variant for fleet in fleets))
    return baseline_variant(variants) if len(variants) > 1 else None


@dataclass
class VariantFidelity:
    """Every variant cell and fleet against the baseline's."""

    baseline: Variant
    cell_columns: list[dict[str, Any]]  # one per cell, in the cells' order: the summary's columns
    fleets: list[tuple[Fleet, Pairing]]  # each fleet of another variant, with its cells' pairs together
    reencode: VideoComparison | None = None
    self_check: VideoComparison | None = None
    video: Path | None = None  # the baseline video re-encoded and compared with itself

    def _fleet_record(self, fleet: Fleet, pairing: Pairing) -> dict[str, Any]:
        return {
            "label": fleet.label,
            "layout": str(fleet.layout),
            "variant": fleet.variant.name,
            "baseline": f"{fleet.layout} {self.baseline}",
            **Figures.of(pairing.differences).as_dict(),
            "requests": pairing.requests,
            "skipped": dict(pairing.skipped),
            **({"why_not": pairing.why_none} if pairing.why_none else {}),
        }

    def as_dict(self) -> dict[str, Any]:
        """The report's `fidelity`."""
        return {
            "baseline": self.baseline.name,
            "method": METHOD,
            "bound": BOUND,
            "video": None if self.video is None else str(self.video),
            "reencode": _comparison(self.reencode),
            "self": _comparison(self.self_check),
            "variants": [self._fleet_record(fleet, pairing) for fleet, pairing in self.fleets],
            "summary": self.lines(),
        }

    def lines(self) -> list[str]:
        """The comparison in a few lines, as the terminal and the page print it."""
        lines = []
        for fleet, pairing in self.fleets:
            figures = Figures.of(pairing.differences)
            head = f"{fleet.label} vs {fleet.layout} {self.baseline}"
            if not figures.compared:
                lines.append(f"{head}: no videos compared: {pairing.text().removeprefix('none: ')}")
                continue
            skipped = sum(pairing.skipped.values())
            lines.append(
                f"{head}: {figures.compared} video{'s' * (figures.compared != 1)}, mean {figures.mean_levels:.2f} / "
                f"max {figures.max_levels} levels, median PSNR {_db(figures.psnr_median_db)}"
                + (f" ({figures.identical} identical)" if figures.identical else "")
                + (f"; {skipped} not compared: " + ", ".join(pairing.skipped) if skipped else "")
            )
        if self.reencode is not None and self.reencode.difference is not None:
            d = self.reencode.difference
            lines.append(
                f"re-encoding a baseline video alone (lossy H.264): mean {d.mean_levels:.2f} / max {d.max_levels} "
                f"levels, PSNR {_db(d.psnr_db)}; figures near these are the codec's, not the variant's"
            )
        elif self.reencode is not None:
            lines.append(f"no re-encode floor: {self.reencode.why_not}")
        if self.self_check is not None and self.self_check.difference is not None:
            exact = self.self_check.difference.identical
            lines.append(f"the baseline against itself: {'exact (0 levels)' if exact else 'NOT exact'}")
        return lines


def _comparison(comparison: VideoComparison | None) -> dict[str, Any] | None:
    if comparison is None:
        return None
    if comparison.difference is None:
        return {"why_not": comparison.why_not}
    d = comparison.difference
    return {"frames": d.frames, "mean_levels": d.mean_levels, "max_levels": d.max_levels, "psnr_db": _finite(d.psnr_db)}


def _columns(text: str, pairing: Pairing | None) -> dict[str, Any]:
    figures = Figures.of(pairing.differences) if pairing else None
    values = (
        (figures.compared, figures.mean_levels, figures.max_levels, _finite(figures.psnr_median_db))
        if figures
        else (None,) * len(FIGURE_KEYS)
    )
    return {COLUMN: text, **dict(zip(FIGURE_KEYS, values, strict=True))}


def compare_variants(fleets: Sequence[Fleet], cells: Sequence[CellResult]) -> VariantFidelity | None:
    """Each cell of another variant against the baseline's cell of the same layout and setting; None where the bench
    runs one variant. Decodes every pair: run it off an event loop."""
    baseline = baseline_of(fleets)
    if baseline is None:
        return None
    base_cells = {_cell_key(c): c for c in cells if c.fleet is not None and c.fleet.variant == baseline}
    started = {str(c.fleet.layout) for c in base_cells.values() if c.fleet is not None}
    columns: list[dict[str, Any]] = []
    by_fleet: dict[str, Pairing] = {fleet.label: Pairing() for fleet in fleets if fleet.variant != baseline}
    for cell in cells:
        if cell.fleet is None or cell.fleet.variant == baseline:
            columns.append(_columns("baseline", None))
            continue
        twin = base_cells.get(_cell_key(cell))
        if twin is None:
            layout = str(cell.fleet.layout)
            why = f"{layout} {baseline} did not start" if layout not in started else "no baseline cell of its setting"
            pairing = Pairing(requests=len(cell.views), why_none=why)
        else:
            pairing = pair_cell(cell, twin)
        columns.append(_columns(pairing.text(), pairing))
        by_fleet[cell.fleet.label].add(pairing)
    for fleet in fleets:
        mine = by_fleet.get(fleet.label)
        if mine is not None and not mine.requests and mine.why_none is None:
            mine.why_none = "did not start"
    fidelity = VariantFidelity(baseline, columns, [(f, by_fleet[f.label]) for f in fleets if f.label in by_fleet])
    first = next((p.first_baseline for _, p in fidelity.fleets if p.first_baseline is not None), None)
    if first is not None and first.video_path is not None:
        # One video is enough to show the codec's share: a second encode costs about what the first did.
        fidelity.video = first.video_path
        fidelity.reencode = reencode_difference(first.video_path, first.request.output_fps)
        fidelity.self_check = compare_videos(first.video_path, first.video_path)
    return fidelity
