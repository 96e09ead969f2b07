"""The documented `omni-studio` command lines (the README's walk-through and the docs pages), run as written: each
one that needs no GPU and no remote server runs here (on loopback, from a folder laid out like the repository's
root); the others are parsed. The command table and each command's section in docs/cli.md name only real flags."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from studio.backend.servers.launchers import LaunchSpec
from studio.backend.servers.supervisor import ManagedServer
from studio.config import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
COMMANDS_PAGE = PROJECT_ROOT / "docs" / "cli.md"
# Where command lines are documented: the README's walk-through, then every docs page (in ```bash blocks).
DOCUMENTS = [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
PROGRAM = ".venv/bin/omni-studio"
# fp8 products, SageAttention's and FlashAttention 3's kernels need a CUDA GPU (Hopper for the kernels the engine builds).
NEEDS_A_GPU_OR_A_SERVER = (
    "--engine vllm-omni",
    "--engine remote",
    "--gpus",
    "--tp",
    "--quantization fp8",
    "--attention-backend sage",
    "--attention-backend flash3",
)
# Commands that serve until stopped: where they answer once ready, and the env that sets their port.
SERVING = {"ui": ("/", "OMNI_STUDIO_PORT"), "engine": ("/health", "OMNI_STUDIO_ENGINE_PORT")}


def command_lines_of(document: Path) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith(PROGRAM):
                lines.append(" ".join(line.split()))
    return lines


def documented_command_lines() -> list[str]:
    """Every documented command line, once (the README's walk-through repeats lines of docs/cli.md)."""
    return list(dict.fromkeys(line for document in DOCUMENTS for line in command_lines_of(document)))


def command_table_rows() -> dict[str, str]:
    """The command table and each command's own section: command name -> the rest of its row, and its section."""
    text = COMMANDS_PAGE.read_text(encoding="utf-8")
    rows = {}
    for match in re.finditer(r"^\| `omni-studio (\w+)[^`]*` \|(.*)\|$", text, re.M):
        rows[match.group(1)] = match.group(2)
    for match in re.finditer(r"^## `omni-studio (\w+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        rows[match.group(1)] = rows.get(match.group(1), "") + " " + match.group(2)
    return rows


LINES = documented_command_lines()
RUNNABLE = [line for line in LINES if not any(marker in line for marker in NEEDS_A_GPU_OR_A_SERVER)]


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    return argv if (PROJECT_ROOT / PROGRAM).exists() else [sys.executable, "-m", "studio", *argv[1:]]


def _flags_of(command: str) -> set[str]:
    """The flags `omni-studio COMMAND --help` lists."""
    from studio.cli import build_parser

    with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()) as shown:
        build_parser().parse_args([command, "--help"])
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", shown.getvalue()))


def test_the_readme_has_runnable_command_lines():
    assert len(LINES) >= 6
    assert {shlex.split(line)[1] for line in RUNNABLE} >= {"ui", "generate", "bench", "engine", "doctor"}
    # The README's walk-through: a first video, several at once, the bench, a vLLM-Omni server.
    walk_through = command_lines_of(README)
    assert {shlex.split(line)[1] for line in walk_through} >= {"ui", "generate", "bench"}
    assert any("--engine vllm-omni" in line for line in walk_through)


@pytest.mark.parametrize("line", LINES, ids=lambda line: shlex.split(line)[1])
def test_every_readme_command_line_parses(line):
    from studio.cli import build_parser

    build_parser().parse_args(shlex.split(line)[1:])  # argparse exits on a flag it does not know


FLAG = r"(?<![\w-])--[a-z][a-z-]*"
# A variants file's line in a row (`name = "serve args"`) names the flags of the server the bench starts, not the command's.
QUOTED_SERVE_ARGS = r'`\w+ = "([^"`]*--[^"`]*)"`'


def test_every_flag_of_the_command_table_exists():
    rows = command_table_rows()
    assert set(rows) == {"ui", "generate", "bench", "plan", "engine", "doctor", "keys"}
    for name, row in rows.items():
        serve_args = set(re.findall(FLAG, " ".join(re.findall(QUOTED_SERVE_ARGS, row))))
        named = set(re.findall(FLAG, re.sub(QUOTED_SERVE_ARGS, "", row)))
        assert named <= _flags_of(name), f"{name}: {sorted(named - _flags_of(name))}"
        assert serve_args <= _flags_of("engine"), f"{name}'s serve args: {sorted(serve_args - _flags_of('engine'))}"
    assert re.findall(QUOTED_SERVE_ARGS, rows["bench"]), "the bench row shows a variants example"


@pytest.fixture
def repo_like_folder(tmp_path, monkeypatch):
    """A folder where the README's relative paths resolve (`.venv`, `assets`) and its outputs land."""
    for name in (".venv", "assets"):
        (tmp_path / name).symlink_to(PROJECT_ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMNI_STUDIO_ENGINE_THREADS", "1")
    return tmp_path


@pytest.mark.parametrize("line", RUNNABLE, ids=lambda line: shlex.split(line)[1])
def test_readme_command_runs(line, repo_like_folder):
    argv = _argv(line)
    command = shlex.split(line)[1]
    if command in SERVING:
        health_path, port_env = SERVING[command]

        def launch(port: int) -> LaunchSpec:
            if "--port" in argv:  # the README's port may be taken here: the same line on a free one
                at = argv.index("--port") + 1
                return LaunchSpec(name=command, argv=[*argv[:at], str(port), *argv[at + 1 :]])
            return LaunchSpec(name=command, argv=argv, env={port_env: str(port)})

        server = ManagedServer(
            launch, log_path=repo_like_folder / f"{command}.log", init_timeout_s=240, health_path=health_path
        )
        with server:
            assert httpx.get(server.base_url + health_path, timeout=30).status_code == 200
        return
    result = subprocess.run(argv, capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    if command == "generate":
        assert Path(result.stdout.strip().splitlines()[-1]).is_file()
    if command == "bench":
        out = Path(shlex.split(line)[shlex.split(line).index("--out") + 1])
        assert (out / "report.json").is_file() and "recommendation:" in result.stdout
