"""Shared fixtures: real engine subprocesses on loopback, started by the studio's own ManagedServer."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.config import DEFAULT_MODEL_DIR, TINY_WAN_DIR, StudioSettings

# A test's kind is its folder's: tests/unit/ (in-process, quick), tests/integration/ (real subprocesses on loopback),
# tests/browser/ (headless Chromium against a running studio), tests/vllm_omni/ (the real vLLM-Omni server). `-m unit`
# (make test-unit) runs the quick ones.
KINDS = ("unit", "integration", "browser", "vllm_omni")
TESTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            folder = Path(str(item.fspath)).resolve().relative_to(TESTS_DIR).parts[0]
        except ValueError:
            continue
        if folder in KINDS:
            item.add_marker(getattr(pytest.mark, folder))
    # The files holding a test of minutes go first: on several workers (make test), each is then begun while the
    # others' short files fill the rest, instead of one worker running it alone at the end. make test keeps this
    # order (--no-loadscope-reorder: xdist would otherwise hand out the files with the most tests first).
    long_files = {item.fspath for item in items if item.get_closest_marker("long")}
    items.sort(key=lambda item: item.fspath not in long_files)


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

MODEL_DIR = Path(DEFAULT_MODEL_DIR)  # the embedded engine's default: the project's small model
MODEL_NAME = MODEL_DIR.name
# vLLM-Omni serves diffusers pipelines it knows (Wan); its tests use the tiny random-weight Wan.
WAN_DIR = Path(TINY_WAN_DIR)
API_KEY = "test-key-5f1c"
# Small shapes keep the CPU tests quick; sizes stay multiples of 16 like every tier size.
SMALL = {"size": "64x64", "num_frames": "5", "num_inference_steps": "2"}


def engine_settings(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, **{"model": str(MODEL_DIR), "engine_threads": 1, **values})


def start_engine(tmp_path: Path, **values) -> ManagedServer:
    settings = engine_settings(**values)
    server = ManagedServer(
        lambda port: embedded_launch(settings, port, output_dir=tmp_path / "engine-out"),
        log_path=tmp_path / "engine.log",
        init_timeout_s=120,
    )
    server.start()
    return server


@pytest.fixture(scope="session")
def engine(tmp_path_factory) -> Iterator[ManagedServer]:
    server = start_engine(tmp_path_factory.mktemp("engine"))
    yield server
    server.stop()


@pytest.fixture
def http(engine) -> Iterator[httpx.Client]:
    """A plain HTTP client on the session's engine."""
    with httpx.Client(base_url=engine.base_url, timeout=60) as client:
        yield client


def multipart(**fields: str) -> dict:
    """Form fields as httpx sends them as multipart/form-data (given as `files`)."""
    return {name: (None, value) for name, value in fields.items()}


@pytest.fixture(scope="session")
def wan_engine(tmp_path_factory) -> Iterator[ManagedServer]:
    """An engine on the tiny random-weight Wan: its noise videos are large (noise compresses worst)."""
    server = start_engine(tmp_path_factory.mktemp("wan-engine"), model=str(WAN_DIR))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def keyed_engine(tmp_path_factory) -> Iterator[ManagedServer]:
    server = start_engine(tmp_path_factory.mktemp("keyed"), api_key=API_KEY)
    yield server
    server.stop()


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs: a disk that fills up (skipped where it cannot be mounted, without root)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
