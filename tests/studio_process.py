"""The studio as a user starts it (`python -m studio ui` on a free loopback port, in its own process group), and the
headless Chromium that drives its page: one place for the tests, the benchmarks and the docs' screenshots."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from studio.backend.servers.supervisor import free_port
from tests.waiting import wait_for_page

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("OMNI_STUDIO_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
# Where several pages stand for several people, each its own browser: none of them is a background tab.
FOREGROUND_ARGS = [
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]


@dataclass
class RunningStudio:
    url: str
    outputs: Path
    process: subprocess.Popen
    log: Path


# Every studio started here, for the browser tests' check that its log holds no error.
STARTED: list[RunningStudio] = []


def start_studio(
    outputs: Path, log: Path, *extra: str, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> RunningStudio:
    """The studio with `extra` flags, once its page answers; one that never answers is killed, with its log's tail
    in the error."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "studio", "ui", "--port", str(port), "--out", str(outputs), *extra],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its engine goes with it when the group is stopped
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_page(url, process, log, timeout_s)
    except RuntimeError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    studio = RunningStudio(url, outputs, process, log)
    STARTED.append(studio)
    return studio


def stop_studio(studio: RunningStudio) -> None:
    """SIGTERM to its process group (the studio and its engines), SIGKILL after 30 s."""
    process = studio.process
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def open_advanced(page) -> None:
    """The Generate form's "Advanced settings" unfolded (folded as the page opens), for a script that fills them."""
    field = page.locator("#frames input")
    if not field.is_visible():
        page.locator("#advanced").get_by_text("Advanced settings").first.click()
        field.wait_for(state="visible", timeout=30_000)


def run_small_bench(page, requests: int = 2, concurrency: str = "1,2") -> None:
    """A bench of short videos (5 frames, 2 steps, no warm-up) from the Bench tab, waited for until it is done: the
    tab then shows its table, recommendation and plots."""
    page.get_by_role("tab", name="Bench").click()
    page.locator("#bench-requests input").fill(str(requests))
    page.locator("#bench-concurrency textarea, #bench-concurrency input").first.fill(concurrency)
    page.locator("#bench-frames input").fill("5")
    page.locator("#bench-steps input").fill("2")
    page.locator("#bench-warmup input").fill("0")
    page.locator("#bench-run").click()
    page.locator("#bench-status").get_by_text("done in").wait_for(timeout=300_000)
