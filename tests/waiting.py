"""Polling in tests: until a condition holds, or a bound passes with a message that names what was awaited."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    what: str,
    timeout_s: float,
    poll_s: float = 0.2,
    detail: Callable[[], str] | None = None,
) -> T:
    """The first truthy value of `condition()`, asked every `poll_s` for up to `timeout_s`; past that, an
    AssertionError naming `what`, with `detail()` (a log's tail, the rows seen last) when given."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout_s, detail))
        time.sleep(poll_s)
    return value


async def wait_for_async(
    condition: Callable[[], T | Awaitable[T]],
    what: str,
    timeout_s: float,
    poll_s: float = 0.05,
    detail: Callable[[], str] | None = None,
) -> T:
    """`wait_for` inside an event loop: between asks it awaits `asyncio.sleep(poll_s)` (0 only lets the other
    tasks run), so the loop's other tasks go on. `condition` may be a coroutine function: its result is awaited."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout_s, detail))
        await asyncio.sleep(poll_s)


def _timed_out(what: str, timeout_s: float, detail: Callable[[], str] | None) -> str:
    message = f"timed out after {timeout_s:g} s waiting for {what}"
    return f"{message}: {detail()}" if detail is not None else message


def log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else f"(no {log})"


def wait_for_page(url: str, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until GET `url` answers 200. A RuntimeError with the log's tail if `process` (the server, writing to `log`)
    exits first or the page does not answer within `timeout_s`; the process is the caller's to stop."""

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {process.returncode}:\n{log_tail(log)}")
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, f"{url} to answer", timeout_s)
    except AssertionError as late:
        raise RuntimeError(f"{late}:\n{log_tail(log)}") from None


class LoopLag:
    """The longest the running event loop was held at once while this is entered (`async with LoopLag() as lag`,
    then `lag.held_s`): a ticker on the same loop measures the gap between its ticks past `tick_s`."""

    def __init__(self, tick_s: float = 0.01) -> None:
        self.tick_s = tick_s
        self.held_s = 0.0
        self._watching = False
        self._task: asyncio.Task | None = None

    async def _tick(self) -> None:
        while self._watching:  # not a poll: it measures how long the event loop is held at once
            before = time.monotonic()
            await asyncio.sleep(self.tick_s)
            self.held_s = max(self.held_s, time.monotonic() - before - self.tick_s)

    async def __aenter__(self) -> LoopLag:
        self._watching = True
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._watching = False
        if self._task is not None:
            await self._task
