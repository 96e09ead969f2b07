"""Headless Chromium (Debian's package) driven by Playwright, against the studio started as a user starts it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# Re-exported: the browser tests and the benchmarks import them from here.
from tests.studio_process import CHROMIUM, CHROMIUM_ARGS, STARTED, RunningStudio, start_studio, stop_studio

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "STARTED", "RunningStudio", "start_studio", "stop_studio"]


@pytest.fixture(scope="module")
def browser():
    # Module scope: Playwright's sync API holds an event loop on the main thread while it runs, which
    # must be gone before tests elsewhere call asyncio.run().
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        reason = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: browser tests must run under CI")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


LOG_ERRORS = ("Traceback (most recent call last)", "Exception in ASGI application", "didn't return enough output")


def log_errors(text: str) -> list[str]:
    """The lines of a studio's log that tell of an error: a traceback, an exception Gradio caught and logged."""
    return [line for line in text.splitlines() if any(mark in line for mark in LOG_ERRORS)]


@pytest.fixture(autouse=True)
def studio_log_stays_clean(request):
    """A browser test fails when a studio's log gained a traceback or an error event while it ran (an error
    Gradio swallows shows only there)."""
    if "tests/browser" not in str(request.node.fspath):
        yield
        return
    seen = {id(studio): studio.log.stat().st_size if studio.log.exists() else 0 for studio in STARTED}
    yield
    for studio in STARTED:
        if not studio.log.exists():
            continue
        with studio.log.open("rb") as handle:
            handle.seek(seen.get(id(studio), 0))
            added = handle.read().decode(errors="replace")
        errors = log_errors(added)
        assert not errors, f"{studio.log} gained errors: {errors[:5]}\n{added[-3000:]}"


@pytest.fixture(scope="module")
def studio_app(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("studio")
    studio = start_studio(folder / "outputs", folder / "studio.log")
    yield studio
    stop_studio(studio)
