"""Engine servers as the benchmarks start them: waiting for their health check, stopping their process group, and
a git revision of this repository laid out beside this checkout."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from benchmarks.harness import ROOT


def wait_healthy(
    url: str, process: subprocess.Popen, timeout_s: float, log: Path | None = None, interval_s: float = 0.25
) -> None:
    """Until `url`/health answers 200; raises where the process exits first or the time runs out (with the end of
    its log, where there is one)."""
    tail = (lambda: "\n" + log.read_text(errors="replace")[-3000:]) if log is not None else (lambda: "")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it was ready{tail()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(interval_s)
    raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s{tail()}")


def stop_group(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to a process started with `start_new_session=True` and its children; SIGKILL after `timeout_s`."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def other_checkout(rev: str, where: Path) -> Iterator[Path]:
    """Git revision `rev` of this repository laid out at `where` (a temporary worktree), removed afterwards."""
    subprocess.run(["git", "worktree", "add", "--detach", str(where), rev], cwd=ROOT, check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, check=False)
