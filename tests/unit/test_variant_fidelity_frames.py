"""The bench's fidelity figures: frames compared level by level (known differences give known figures), mp4 files
compared frame by frame (or why not), and a variant's cells paired with the baseline's twins."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from studio.backend.bench.cells import CellResult
from studio.backend.bench.fidelity import DifferenceSum, compare_videos, frame_difference, reencode_difference
from studio.backend.bench.variant_fidelity import Figures, baseline_of, compare_variants
from studio.backend.bench.variants import Variant, baseline_variant
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.servers.layouts import Layout
from studio.media import encode_mp4
from studio.protocol import VideoRequest


def frames(value: int, count: int = 3, height: int = 16, width: int = 24) -> np.ndarray:
    return np.full((count, height, width, 3), value, dtype=np.uint8)


def gradient(count: int = 5, height: int = 32, width: int = 48) -> np.ndarray:
    """Smooth content, which H.264 keeps close: a moving ramp."""
    ys, xs = np.mgrid[0:height, 0:width]
    video = [(((xs + 3 * t) * 4 + ys * 2) % 200 + 20) for t in range(count)]
    return np.repeat(np.stack(video)[..., None], 3, axis=-1).astype(np.uint8)


def test_identical_frames_differ_by_nothing_and_have_infinite_psnr():
    difference = frame_difference(frames(100), frames(100))
    assert difference.mean_levels == 0 and difference.max_levels == 0 and difference.identical
    assert math.isinf(difference.psnr_db) and difference.frames == 3


def test_a_known_offset_gives_the_known_figures():
    difference = frame_difference(frames(100), frames(110))
    assert difference.mean_levels == 10 and difference.max_levels == 10 and not difference.identical
    assert difference.psnr_db == pytest.approx(10 * math.log10(255**2 / 100))  # 28.13 dB
    assert difference.psnr_db == pytest.approx(28.1308, abs=1e-4)


def test_half_the_pixels_offset_halves_the_mean_and_the_sign_does_not_matter():
    a, b = frames(100), frames(100)
    b[:, :8] = 120  # the top half of every frame 20 levels up
    a[:, :, :12] = 200  # the left half 200 in a, so 80 or 100 below it in b: no uint8 wrap-around
    difference = frame_difference(a, b)
    expected = np.abs(a.astype(int) - b.astype(int))
    assert difference.mean_levels == pytest.approx(expected.mean()) and difference.max_levels == 100
    assert difference.psnr_db == pytest.approx(10 * math.log10(255**2 / np.square(expected).mean()))
    assert frame_difference(b, a) == difference
    extreme = frame_difference(frames(0), frames(255))
    assert extreme.max_levels == 255 and extreme.psnr_db == pytest.approx(0.0)


def test_frames_added_one_at_a_time_sum_to_the_whole_videos_figures():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    total = DifferenceSum()
    for frame_a, frame_b in zip(a, b, strict=True):
        total.add(frame_a, frame_b)
    assert total.result() == frame_difference(a, b)


def test_frames_of_another_shape_or_type_do_not_compare():
    with pytest.raises(ValueError, match="shape"):
        frame_difference(frames(0), frames(0, height=8))
    with pytest.raises(ValueError, match="uint8"):
        frame_difference(frames(0).astype(np.float32), frames(0).astype(np.float32))
    with pytest.raises(ValueError, match="no frames"):
        DifferenceSum().result()


def mp4(path: Path, video: np.ndarray) -> Path:
    encode_mp4(video, 10, path)
    return path


def test_videos_compare_frame_by_frame_where_size_and_frame_count_match(tmp_path):
    base = mp4(tmp_path / "base.mp4", gradient())
    brighter = mp4(tmp_path / "brighter.mp4", gradient() + 8)
    itself = compare_videos(base, base).difference
    assert itself is not None and itself.identical and math.isinf(itself.psnr_db) and itself.frames == 5
    offset = compare_videos(base, brighter).difference
    assert offset is not None and offset.frames == 5
    assert 6 < offset.mean_levels < 10 and offset.max_levels >= 8  # 8 levels, give or take the codec's
    assert 25 < offset.psnr_db < 35

    shorter = compare_videos(base, mp4(tmp_path / "short.mp4", gradient(count=4)))
    assert shorter.difference is None and shorter.why_not == "frame counts differ: 5 and 4"
    smaller = compare_videos(base, mp4(tmp_path / "small.mp4", gradient(height=16)))
    assert smaller.difference is None and smaller.why_not == "sizes differ: 48x32 and 48x16"
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video")
    assert compare_videos(base, broken).why_not.startswith("does not decode")


def test_a_re_encode_shows_what_the_codec_alone_moves(tmp_path):
    floor = reencode_difference(mp4(tmp_path / "base.mp4", gradient()), fps=10).difference
    assert floor is not None and floor.frames == 5
    assert floor.mean_levels < 3 and 35 < floor.psnr_db < math.inf


def test_the_baseline_is_the_variant_with_no_args_of_its_own_else_the_first():
    assert baseline_variant([Variant("fp8", "--quantization fp8"), Variant("base", "")]).name == "base"
    assert baseline_variant([Variant("fp8", "--quantization fp8"), Variant("eager", "-e")]).name == "fp8"


def test_figures_of_pairs_take_the_mean_the_max_and_the_median_and_keep_json_finite():
    pairs = [frame_difference(frames(100), frames(100 + step)) for step in (0, 0, 2, 10)]
    figures = Figures.of(pairs)
    assert (figures.compared, figures.identical, figures.max_levels) == (4, 2, 10)
    assert figures.mean_levels == pytest.approx(3.0)
    assert math.isinf(figures.psnr_median_db)  # the two middle pairs: identical and 2 levels off
    assert figures.as_dict()["psnr_median_db"] is None and "inf dB" in figures.text()
    finite = Figures.of(pairs[2:])
    assert finite.psnr_median_db == pytest.approx((pairs[2].psnr_db + pairs[3].psnr_db) / 2)
    assert finite.text() == f"6.00 / 10, {finite.psnr_median_db:.1f} dB"
    assert Figures.of([]).text() == "none" and Figures.of([]).as_dict()["compared"] == 0


@dataclass(frozen=True)
class FakeFleet:
    layout: Layout
    variant: Variant

    @property
    def label(self) -> str:
        return f"{self.layout} {self.variant}"


def view(tmp_path: Path, name: str, seed: int, video: np.ndarray | None) -> RequestView:
    request = VideoRequest(prompt=f"prompt {seed}", width=48, height=32, num_frames=5, fps=10, seed=seed)
    done = video is not None
    return RequestView(
        id=name,
        run_id="run",
        position=seed,
        request=request,
        state=RequestState.DONE if done else RequestState.FAILED,
        video_path=mp4(tmp_path / f"{name}.mp4", video) if done else None,
    )


def cell(fleet: FakeFleet, views: list[RequestView], concurrency: int = 1) -> CellResult:
    return CellResult("256p", True, concurrency, 1, None, views, [], fleet)  # type: ignore[arg-type]


def test_each_variant_cell_is_paired_with_the_baselines_twins_and_says_what_it_could_not_compare(tmp_path):
    one, two = Layout(1, 1), Layout(2, 1)
    base, fast = Variant("base", ""), Variant("fast", "--step-cache taylor")
    fleets = [FakeFleet(one, base), FakeFleet(one, fast), FakeFleet(two, base), FakeFleet(two, fast)]
    cells = [
        cell(fleets[0], [view(tmp_path, "b0", 0, gradient()), view(tmp_path, "b1", 1, gradient())]),
        # seed 0: 8 levels off its twin; seed 1: failed; seed 2: no twin in the baseline's cell
        cell(
            fleets[1],
            [
                view(tmp_path, "f0", 0, gradient() + 8),
                view(tmp_path, "f1", 1, None),
                view(tmp_path, "f2", 2, gradient()),
            ],
        ),
        cell(fleets[3], [view(tmp_path, "g0", 0, gradient())]),  # its layout's baseline did not start
    ]
    assert baseline_of(fleets) == base and baseline_of(fleets[:1]) is None
    fidelity = compare_variants(fleets, cells)  # type: ignore[arg-type]
    assert fidelity is not None
    columns = fidelity.cell_columns
    assert columns[0]["vs_baseline"] == "baseline" and columns[0]["vs_baseline_compared"] is None
    assert columns[1]["vs_baseline_compared"] == 1 and columns[1]["vs_baseline"].endswith(" dB (1 of 3)")
    assert 6 < columns[1]["vs_baseline_mean_levels"] < 10
    assert columns[2]["vs_baseline"] == "none: 2x1 base did not start"

    report = json.loads(json.dumps(fidelity.as_dict(), allow_nan=False))  # strict JSON: no Infinity
    first, second = report["variants"]
    assert (first["label"], first["baseline"], first["compared"], first["requests"]) == ("1x1 fast", "1x1 base", 1, 3)
    assert first["skipped"] == {"not done in the variant": 1, "no baseline request of its prompt and seed": 1}
    assert 25 < first["psnr_median_db"] < 35
    assert second["compared"] == 0 and second["why_not"] == "2x1 base did not start"
    assert report["video"].endswith("b0.mp4") and report["self"]["max_levels"] == 0
    assert report["reencode"]["psnr_db"] > 0 and report["reencode"]["frames"] == 5
    assert report["summary"][0].startswith("1x1 fast vs 1x1 base: 1 video, mean ")
    assert report["summary"][1].startswith("2x1 fast vs 2x1 base: no videos compared: 2x1 base did not start")
    assert report["summary"][-1] == "the baseline against itself: exact (0 levels)"


def test_the_pages_bench_table_shows_the_column_where_the_report_has_it():
    from studio.ui import bench_view

    row = {name: None for name in bench_view.SUMMARY_COLUMNS} | {"guardrails": True, "concurrency": 1}
    column = bench_view.SUMMARY_COLUMNS["vs_baseline"]
    table = bench_view.summary_table(
        {"cells": [row | {"vs_baseline": "baseline"}, row | {"vs_baseline": "1.00 / 9, 40.0 dB"}]}
    )
    assert list(table[column]) == ["baseline", "1.00 / 9, 40.0 dB"]
    without = {key: value for key, value in row.items() if key not in bench_view.FLEET_ONLY}
    assert column not in bench_view.summary_table({"cells": [without]})
