"""scripts/train_small_t2v.py: seeded runs repeat bit for bit, log their loss and save a loadable pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "train_small_t2v.py"
TINY = ["--steps", "3", "--batch-size", "4", "--pixels", "64", "--width", "16", "--depth", "1", "--log-every", "1"]


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return {
        f"{part}.{name}": tensor
        for part in ("text_encoder", "transformer")
        for name, tensor in load_file(path / part / "diffusion_pytorch_model.safetensors").items()
    }


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.timeout(300)
def test_training_is_seeded_logged_and_loadable(tmp_path):
    first = _train(tmp_path / "a")
    _train(tmp_path / "b")
    _train(tmp_path / "c", "--seed", "1")
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))
    assert not _same(_weights(tmp_path / "a"), _weights(tmp_path / "c"))

    assert first.stdout.count("loss ") == 3
    record = json.loads((tmp_path / "a" / "training.json").read_text())
    assert [entry["step"] for entry in record["loss_history"]] == [1, 2, 3]
    assert record["seed"] == 0 and record["device"] == "cpu" and record["parameters"] > 0

    from studio.smallmodel import OmniSmallT2VPipeline

    pipe = OmniSmallT2VPipeline.from_pretrained(tmp_path / "a")
    pipe.set_progress_bar_config(disable=True)
    assert pipe("a red circle moving left", num_frames=5, num_inference_steps=1).frames.shape == (1, 5, 48, 80, 3)


def test_bad_arguments_are_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "x"), "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2 and "--steps" in result.stderr
