"""`omni-studio bench --variants` puts fidelity next to speed, end to end on the embedded engine: the tiny Wan (the
step cache needs a Wan pipeline; the small default model refuses it at start), a baseline, the same engine again and
a step cache, each video compared with the baseline's of the same prompt and seed."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

from tests.conftest import WAN_DIR

# Four steps: the step cache's schedule (the first two, one in every two, the last) skips the third.
SMALL = ["--tier", "256p", "--aspect", "1:1", "--frames", "5", "--steps", "4", "--requests", "2"]
VARIANTS = 'base = ""\nsame = "--step-cache off"\ntaylor = "--step-cache taylor --step-cache-interval 2"\n'


def test_each_variants_videos_are_compared_with_the_baselines_of_the_same_prompt_and_seed(tmp_path):
    variants = tmp_path / "variants.toml"
    variants.write_text(VARIANTS)
    out = tmp_path / "report"
    flags = ["--concurrency", "1", "--warmup", "0", "--variants", str(variants), "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "studio", "bench", "--model", str(WAN_DIR), *SMALL, *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert [f["label"] for f in report["fleets"]] == ["1x1 base", "1x1 same", "1x1 taylor"]
    # Every fleet got the same requests: the bench's seeds, counting up from its own.
    seeds = {f: [r["seed"] for r in report["requests"] if r["variant"] == f] for f in ("base", "same", "taylor")}
    assert seeds["base"] == seeds["same"] == seeds["taylor"] == [0, 1]

    fidelity = report["fidelity"]
    assert fidelity["baseline"] == "base" and "lossy H.264" in fidelity["bound"]
    same, taylor = fidelity["variants"]
    assert (same["label"], same["baseline"], taylor["label"]) == ("1x1 same", "1x1 base", "1x1 taylor")
    # The same engine, the same seeds: the same videos, bit for bit.
    assert (same["compared"], same["identical"], same["max_levels"], same["mean_levels"]) == (2, 2, 0, 0.0)
    assert same["psnr_median_db"] is None  # infinite, which JSON cannot say
    # The step cache estimates a step: the videos move, but stay the same videos.
    assert (taylor["compared"], taylor["identical"], taylor["skipped"]) == (2, 0, {})
    assert 0 < taylor["mean_levels"] < 64 and 0 < taylor["max_levels"] <= 255
    assert math.isfinite(taylor["psnr_median_db"]) and 10 < taylor["psnr_median_db"] < 80
    floor = fidelity["reencode"]
    assert floor["frames"] == 5 and floor["mean_levels"] > 0 and math.isfinite(floor["psnr_db"])
    assert fidelity["self"]["max_levels"] == 0

    by_variant = {cell["variant"]: cell for cell in report["cells"]}
    assert by_variant["base"]["vs_baseline"] == "baseline"
    assert by_variant["same"]["vs_baseline"] == "0.00 / 0, inf dB"
    assert by_variant["taylor"]["vs_baseline_compared"] == 2
    assert by_variant["taylor"]["vs_baseline"] == (
        f"{taylor['mean_levels']:.2f} / {taylor['max_levels']}, {taylor['psnr_median_db']:.1f} dB"
    )
    with (out / "summary.csv").open() as handle:
        assert next(row["vs_baseline"] for row in csv.DictReader(handle)) == "baseline"

    assert "vs baseline: mean / max levels, PSNR" in result.stdout
    assert "1x1 taylor vs 1x1 base: 2 videos, mean " in result.stdout
    assert "the baseline against itself: exact (0 levels)" in result.stdout
