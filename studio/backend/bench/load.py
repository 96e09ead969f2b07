"""What else the machine was doing while a cell ran: its CPU use and load average, sampled in a background thread.

A cell's figures hold whatever else ran beside it: another job on a small CPU slows an engine's threads as much as
a layout does. The sampler reads, about once a second, the whole machine's busy share of its CPU, the share this
process and its children took (the studio, and the servers the bench started; not servers elsewhere) and the
1-minute load average. The rest of the machine's use (`other_cpu_percent`) is the load that is not the bench's own.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

PERIOD_S = 1.0


@dataclass(frozen=True)
class Reading:
    """The machine's counters at one instant: cumulative, so that two readings give the use between them."""

    wall_s: float  # a monotonic clock
    cpu_total_s: float  # every core's time, summed
    cpu_idle_s: float  # of which idle (iowait included)
    own_cpu_s: float  # CPU time of this process and its children since the sampler started
    load_1m: float | None


@dataclass(frozen=True)
class CellLoad:
    """The machine's load during a cell: CPU in % of the whole machine (all its cores) over the cell, its busiest
    period, and the mean 1-minute load average (which lags: it still holds the cell before)."""

    samples: int
    cores: int
    cpu_percent: float
    cpu_percent_max: float
    own_cpu_percent: float
    other_cpu_percent: float
    load_avg_1m: float | None

    def columns(self) -> dict[str, float | int | None]:
        """As the report's columns."""
        return {
            "cpu_percent": self.cpu_percent,
            "cpu_percent_max": self.cpu_percent_max,
            "own_cpu_percent": self.own_cpu_percent,
            "other_cpu_percent": self.other_cpu_percent,
            "load_avg_1m": self.load_avg_1m,
            "load_samples": self.samples,
            "cores": self.cores,
        }


class ProcessTreeClock:
    """CPU seconds of this process and its descendants since it was made. A process that ends between two reads
    takes its last stretch with it (psutil cannot read an ended process): the own share is then a little low."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._last: dict[tuple[int, float], float] = {}
        self._total = 0.0
        self._primed = False
        self._read()  # what ran before the sampler started is not counted
        self._primed = True

    def _read(self) -> float:
        try:
            processes = [self._me, *self._me.children(recursive=True)]
        except psutil.Error:
            processes = [self._me]
        for process in processes:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
            except psutil.Error:  # ended, or not ours to read
                continue
            used = times.user + times.system
            # A process first seen after the start began after it: all its time is the cell's.
            self._total += max(0.0, used - self._last.get(key, 0.0 if self._primed else used))
            self._last[key] = used
        return self._total

    def __call__(self) -> float:
        return self._read()


def machine_reading(own: Callable[[], float]) -> Reading:
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        load = None
    return Reading(time.monotonic(), sum(times), idle, own(), load)


class LoadSampler:
    """Samples the machine's load in a background thread from start() to stop(): a reading every `period_s`, and
    one at each end, so that a cell shorter than a period has its sample too. `read`: the readings (default: the
    machine's, through psutil); `cores`: what a whole machine is (default: its logical CPUs, as its CPU times count
    them)."""

    def __init__(
        self, period_s: float = PERIOD_S, read: Callable[[], Reading] | None = None, cores: int | None = None
    ) -> None:
        self.period_s = period_s
        self._read = read
        self.cores = cores or psutil.cpu_count() or 1
        self._readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def tick(self) -> None:
        """Take one reading."""
        if self._read is None:
            clock = ProcessTreeClock()
            self._read = lambda: machine_reading(clock)
        reading = self._read()
        with self._lock:
            self._readings.append(reading)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.tick()

    def start(self) -> LoadSampler:
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="bench-load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> CellLoad | None:
        """The load between start() and now; None where the readings cannot tell it (no time went by)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.tick()
        return self.summary()

    def summary(self) -> CellLoad | None:
        with self._lock:
            readings = list(self._readings)
        pairs = [
            (before, after)
            for before, after in itertools.pairwise(readings)
            if after.cpu_total_s > before.cpu_total_s and after.wall_s > before.wall_s
        ]
        if not pairs:
            return None

        def busy(before: Reading, after: Reading) -> float:
            return (after.cpu_total_s - before.cpu_total_s) - (after.cpu_idle_s - before.cpu_idle_s)

        total = sum(after.cpu_total_s - before.cpu_total_s for before, after in pairs)
        wall = sum(after.wall_s - before.wall_s for before, after in pairs)
        cpu = 100.0 * sum(busy(*pair) for pair in pairs) / total
        own = min(
            100.0, 100.0 * sum(after.own_cpu_s - before.own_cpu_s for before, after in pairs) / (wall * self.cores)
        )
        # The busiest stretch: of the full periods where there are some (a stretch of a few milliseconds at the end
        # reads 0% or 100%, which says nothing).
        full = [pair for pair in pairs if pair[1].wall_s - pair[0].wall_s >= self.period_s / 2] or pairs
        peak = max(100.0 * busy(b, a) / (a.cpu_total_s - b.cpu_total_s) for b, a in full)
        loads = [after.load_1m for _, after in pairs if after.load_1m is not None]
        return CellLoad(
            samples=len(pairs),
            cores=self.cores,
            cpu_percent=cpu,
            cpu_percent_max=peak,
            own_cpu_percent=own,
            other_cpu_percent=max(0.0, cpu - own),
            load_avg_1m=sum(loads) / len(loads) if loads else None,
        )
