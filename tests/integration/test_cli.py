"""The `omni-studio` commands as a user runs them: a real subprocess each."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from studio.backend.servers.launchers import LaunchSpec
from studio.backend.servers.supervisor import ManagedServer, free_port
from studio.cli.exits import EXIT_FAILED
from studio.media import probe_mp4
from tests.conftest import MODEL_DIR


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
        (["--steps", "500"], "--steps must be from 1 to 200, got 500"),
        (["--seed", "-1"], "--seed must be from 0 to 9223372036854775807, got -1"),
        (["--image-url", "ftp://img.example/cat.png"], "--image-url must be an http:// or https:// address"),
        (["--image-url", "https://img.example/cat.png"], "the embedded engine's models are text-to-video"),
        (["--image", "cat.png"], "the embedded engine's models are text-to-video"),
        (["--engine", "vllm-omni", "--image", "missing.png"], "--image: no image file at 'missing.png'"),
    ],
)
def test_generate_rejects_bad_input_before_starting(args, message, tmp_path):
    result = studio("generate", "x", "--out", str(tmp_path), *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert "starting the" not in result.stderr


def test_generate_refuses_an_empty_prompt_among_others_before_starting(tmp_path):
    result = studio("generate", "a red circle", " ", "a blue square", "--out", str(tmp_path), timeout=60)
    assert result.returncode == 2 and "prompt 2 of 3 is empty" in result.stderr
    assert "starting the" not in result.stderr and result.stdout == ""


def test_generate_reports_a_bad_model_path(tmp_path):
    result = studio("generate", "x", "--model", str(tmp_path / "missing"), "--out", str(tmp_path), timeout=120)
    assert result.returncode == 1
    assert "could not start the engine" in result.stderr and "not found" in result.stderr


def test_generate_reports_a_guardrail_block_and_keeps_the_other_video(tmp_path):
    prompts = ("a field of gore", "a red circle moving left")
    result = studio(
        "generate", *prompts, "--frames", "5", "--steps", "2", "--model", str(MODEL_DIR), "--out", str(tmp_path)
    )
    assert result.returncode == 1  # some failed
    assert "[1/2] 'a field of gore' request blocked by guardrails" in result.stderr
    assert "1 of 2 requests failed" in result.stderr
    (path,) = [Path(line) for line in result.stdout.splitlines()]  # only the video made
    assert json.loads(path.with_suffix(".json").read_text())["parameters"]["prompt"] == prompts[1]


def test_generate_sends_its_prompts_at_once_over_a_fleet(tmp_path):
    """Two prompts on two embedded replicas (a thread each): both sent at once, one to each replica, the paths
    printed in the order of the prompts."""
    prompts = ("a red circle moving left", "a blue square moving up")
    shape = ("--tier", "256p", "--aspect", "1:1", "--frames", "5", "--steps", "2")
    fleet = ("--replicas", "2", "--engine-threads", "1", "--model", str(MODEL_DIR))
    result = studio("generate", *prompts, *shape, *fleet, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "starting 2 replicas of the embedded engine" in result.stderr and "fleet ready in" in result.stderr
    paths = [Path(line) for line in result.stdout.strip().splitlines()[-2:]]
    sidecars = [json.loads(path.with_suffix(".json").read_text()) for path in paths]
    assert [sidecar["parameters"]["prompt"] for sidecar in sidecars] == list(prompts)
    assert all(probe_mp4(path).num_frames == 5 for path in paths)
    # One replica each: the sidecars name the two servers the fleet started.
    ready = next(line for line in result.stderr.splitlines() if line.startswith("fleet ready in"))
    replicas = set(ready.split(" at ", 1)[1].split(", "))
    assert len(replicas) == 2 and {sidecar["endpoint"] for sidecar in sidecars} == replicas
    logs = sorted((tmp_path / "logs" / "generate").glob("embedded-server-*.log"))  # apart from a studio's
    assert [log.name for log in logs] == ["embedded-server-0.log", "embedded-server-1.log"]


def test_doctor_json():
    result = studio("doctor", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["torch"]["installed"] and "cuda_available" in report["torch"]
    assert report["packages"]["diffusers"]
    assert report["vllm_executable"] or "pip install vllm vllm-omni" in report["vllm_note"]


def test_generate_starts_the_engine_before_importing_the_rest_of_the_studio(tmp_path):
    """The engine's start is mostly its own imports: `generate` overlaps it with the studio's by starting the
    engine before importing the heavy parts (array, video and HTTP SDK libraries, the run machinery, the
    progress display). What is imported is read at the moment the engine starts."""
    heavy = ["numpy", "av", "openai", "rich", "torch", "studio.backend.runs.run", "studio.backend.controller"]
    code = f"""
import json, sys
from studio.backend.servers.supervisor import ManagedServer, free_port
from studio.cli.exits import EXIT_FAILED
from studio.cli import main

def start(self, wait=True):
    print(json.dumps([name for name in {heavy!r} if name in sys.modules]))
    raise SystemExit(0)

ManagedServer.start = start
main(["generate", "a red circle", "--out", {str(tmp_path)!r}])
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "starting the embedded engine" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def _modules_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def undescribed_options(help_text: str) -> list[str]:
    """Options of an argparse help text that come without a description: an entry is an indented line starting
    with "-"; its description follows on that line after two spaces, or on the lines indented under it."""
    entries: list[list[str]] = []
    for line in help_text.splitlines():
        if re.match(r"^  -", line):
            entries.append([line.strip()])
        elif entries and line.startswith("   "):
            entries[-1].append(line.strip())
    return [entry[0] for entry in entries if len(entry) == 1 and not re.search(r"\S\s{2,}\S", entry[0])]


@pytest.mark.parametrize("command", ["ui", "generate", "bench", "engine", "doctor"])
def test_every_command_answers_help_with_a_description_for_every_flag(command):
    result = studio(command, "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: omni-studio {command}")
    assert "--help" in result.stdout and undescribed_options(result.stdout) == []


def test_an_option_without_a_description_is_seen():
    help_text = "options:\n  -h, --help  show this\n  --quiet\n  --tier {a,b}\n                 the tier\n"
    assert undescribed_options(help_text) == ["--quiet"]


@pytest.mark.parametrize(
    "code",
    [
        "from studio.cli import main\ntry:\n    main(['engine', '--help'])\nexcept SystemExit:\n    pass",
        "from studio.engine.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from studio.engine.__main__ import main\ntry:\n    main(['--max-batch', 'x'])\nexcept SystemExit:\n    pass",
    ],
)
def test_engine_help_and_bad_flags_answer_without_torch(code):
    assert "torch" not in _modules_after(code)


def test_engine_command_takes_the_engine_flags():
    """`omni-studio engine` and `python -m studio.engine` take the same flags (docs/cli.md's line among them)."""
    from studio.cli import build_parser
    from studio.engine.__main__ import build_parser as engine_parser
    from studio.engine.__main__ import engine_settings

    argv = [
        "--model",
        "assets/omni-small-t2v",
        "--port",
        "8123",
        "--no-guardrails",
        "--max-batch",
        "4",
        "--no-cuda-graphs",
    ]
    from_cli = engine_settings(build_parser().parse_args(["engine", *argv]))
    from_module = engine_settings(engine_parser().parse_args(argv))
    assert from_cli == from_module
    assert (from_cli.model, from_cli.port, from_cli.guardrails) == ("assets/omni-small-t2v", 8123, False)
    assert (from_cli.max_batch, from_cli.cuda_graphs, from_cli.fused_kernels) == (4, False, True)


def test_engine_command_serves_until_stopped(tmp_path):
    def launch(port: int) -> LaunchSpec:
        argv = ["-m", "studio", "engine", "--model", str(MODEL_DIR), "--port", str(port), "--threads", "1"]
        return LaunchSpec(name="engine", argv=[sys.executable, *argv])

    with ManagedServer(launch, log_path=tmp_path / "engine.log", init_timeout_s=240) as server:
        models = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()
        assert [model["id"] for model in models["data"]] == [MODEL_DIR.name]
    assert server.exit_code is not None


def test_bad_engine_flag_values_fail_with_one_line():
    result = studio("engine", "--port", "0", timeout=60)
    assert result.returncode == 2 and "port" in result.stderr and "Traceback" not in result.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`omni-studio doctor --json | head`: the pipe is closed before the report is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "studio", "doctor", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # nobody reads: the report's write meets a closed pipe
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 141
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode(errors="replace")


def test_generate_says_it_waits_for_a_remote_server_that_does_not_answer(tmp_path):
    """A dead remote server: generate says at once that it waits, how long, and which flag changes that."""
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = studio(
        "generate", "a red circle", "--engine", "remote", "--url", url, "--server-wait", "1", "--out", str(tmp_path)
    )
    assert result.returncode == EXIT_FAILED, result.stderr
    assert f"no server answers at {url}: waiting up to 1 s" in result.stderr
    assert "--server-wait SECONDS changes this" in result.stderr
    assert "none came back within 1 s" in result.stderr
    assert "--server-wait" in studio("generate", "--help").stdout
