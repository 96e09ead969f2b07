"""Percentiles, and how long an event loop is held: what a ticker on the loop measures while the work runs."""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np


def percentile(values: list[float], q: float) -> float | None:
    """The `q`th percentile (linear between the closest ranks), None for no values."""
    return round(float(np.percentile(values, q)), 4) if values else None


class LoopWatch:
    """A ticker of `tick_s` on the running event loop, recording how late each tick came: a tick is late by as long
    as something else held the loop (what every other task on it waits for)."""

    def __init__(self, tick_s: float = 0.01) -> None:
        self.tick_s = tick_s
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:  # not a poll: it measures the loop itself
            before = time.perf_counter()
            await asyncio.sleep(self.tick_s)
            self.lags.append(time.perf_counter() - before - self.tick_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def held_s(self) -> float:
        """The longest the loop was held, in seconds."""
        return max(self.lags, default=0.0)
