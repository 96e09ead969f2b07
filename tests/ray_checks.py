"""Checks that a fleet on Ray leaves nothing behind: the processes a run started (Ray's GCS, raylet and workers,
the replicas' servers under them) are all gone once it has shut down."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

# A loaded 2-core machine stops Ray's processes slowly.
GONE_TIMEOUT_S = 60.0


def named(process: psutil.Process) -> str:
    """A process in a few words, for a failure message."""
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def left_running(processes: Iterable[psutil.Process], timeout_s: float = GONE_TIMEOUT_S) -> list[str]:
    """Those of `processes` still running after `timeout_s`, named; empty when every one has ended."""
    _gone, alive = psutil.wait_procs(list(processes), timeout=timeout_s)
    return [named(process) for process in alive if process.is_running()]


@dataclass(frozen=True)
class Seen:
    """A process as it was last seen (it may be gone by the end)."""

    process: psutil.Process
    name: str
    parent: str  # its parent's name
    cmdline: str


class Descendants:
    """Every process seen under `pid` while it runs, looked at every `interval_s` from a thread: what a command
    started, including what it should have ended before it exited (its orphans then no longer show under it)."""

    def __init__(self, pid: int, interval_s: float = 0.1):
        self._root = psutil.Process(pid)
        self._interval_s = interval_s
        self._seen: dict[int, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="descendants", daemon=True)

    def __enter__(self) -> Descendants:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                children = self._root.children(recursive=True)
            except psutil.Error:
                if not self._root.is_running():  # the command has ended
                    return
                children = []  # a process of the tree ended while the tree was read: read it again next pass
            for child in children:
                self._look(child)
            self._stop.wait(self._interval_s)

    def _look(self, process: psutil.Process) -> None:
        # Looked at again on every pass: a process caught between its fork and its exec still has its parent's
        # name and command line (a busy machine widens that window), and shows its own only after the exec.
        # psutil.Process pins the start time: a pid taken again later is not mistaken for this one.
        try:
            parent = process.parent()
            seen = Seen(process, process.name(), parent.name() if parent else "", " ".join(process.cmdline()))
        except psutil.Error:  # gone already
            return
        self._seen[process.pid] = seen

    @property
    def processes(self) -> list[psutil.Process]:
        return [seen.process for seen in self._seen.values()]

    def matching(self, name: str = "", cmdline: str = "") -> list[Seen]:
        """Those seen with this name (cut as /proc cuts it) and with `cmdline` in their command line."""
        return [
            seen for seen in self._seen.values() if (not name or seen.name == name[:15]) and cmdline in seen.cmdline
        ]
