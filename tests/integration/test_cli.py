"""`omni-studio generate` and `doctor` as a user runs them: a real subprocess each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studio.media import probe_mp4
from tests.conftest import MODEL_DIR

pytestmark = pytest.mark.integration


def studio(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "studio", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_generate_prints_the_mp4_path_last(tmp_path):
    result = studio(
        "generate",
        "a red circle moving left",
        "--tier",
        "256p",
        "--aspect",
        "16:9",
        "--frames",
        "6",
        "--steps",
        "2",
        "--seed",
        "42",
        "--model",
        str(MODEL_DIR),
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.suffix == ".mp4" and tmp_path in path.parents
    info = probe_mp4(path)
    assert (info.width, info.height, info.num_frames) == (320, 192, 9)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["parameters"]["prompt"] == "a red circle moving left"
    assert sidecar["seed"] == 42 and sidecar["parameters"]["num_inference_steps"] == 2
    assert sidecar["timings"]["latency_s"] > sidecar["timings"]["inference_s"] > 0
    assert "engine ready in" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--frames", "0"], "frames must be between 5 and 400"),
        (["--fps", "25"], "fps must be one of 10, 16, 24, 30"),
        (["--steps", "500"], "less than or equal to 200"),
        (["--seed", "-1"], "greater than or equal to 0"),
    ],
)
def test_generate_rejects_bad_input_before_starting(args, message, tmp_path):
    result = studio("generate", "x", "--out", str(tmp_path), *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert "starting the" not in result.stderr


def test_generate_reports_a_bad_model_path(tmp_path):
    result = studio("generate", "x", "--model", str(tmp_path / "missing"), "--out", str(tmp_path), timeout=120)
    assert result.returncode == 1
    assert "could not start the engine" in result.stderr and "not found" in result.stderr


def test_generate_reports_a_guardrail_block(tmp_path):
    result = studio("generate", "a field of gore", "--frames", "5", "--steps", "2", "--out", str(tmp_path))
    assert result.returncode == 1 and "blocked by guardrails" in result.stderr


def test_doctor_json():
    result = studio("doctor", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["torch"]["installed"] and "cuda_available" in report["torch"]
    assert report["packages"]["diffusers"]
    assert report["vllm_executable"] or "pip install vllm vllm-omni" in report["vllm_note"]


def test_generate_starts_the_engine_before_importing_the_rest_of_the_studio():
    """The engine's start is mostly its own imports: `generate` overlaps it with the studio's by starting the
    engine from a module that imports none of the heavy parts (array, video and HTTP SDK libraries, the
    run machinery, the progress display)."""
    heavy = ["numpy", "av", "openai", "rich", "studio.backend.runs", "studio.backend.controller"]
    code = (
        "import sys, json; import studio.cli, studio.generate; "
        f"print(json.dumps([name for name in {heavy!r} if name in sys.modules]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
