"""The leader's side of the ranks: starting the followers, hearing from them, telling them, stopping them.
(Each follower's process runs studio.engine.parallel.follower_main.)"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from studio.engine.parallel.follower_main import FollowerGenerator, FollowerSpec, run_follower
from studio.engine.parallel.groups import free_port, join, set_collective_environment
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.messages import Kind, Message
from studio.engine.parallel.rank import ParallelRank
from studio.engine.parallel.settings import ParallelSettings

log = logging.getLogger(__name__)


class FollowerLost(RuntimeError):
    """A follower exited, failed to start, or stopped answering: the engine cannot run across its ranks."""


class Followers:
    """The processes of ranks 1.. and a pipe to each. A follower that exits while the engine runs is reported
    once, to `on_lost`, and every later call fails at once with FollowerLost."""

    def __init__(self, processes: Sequence[Any], pipes: Sequence[Connection]):
        self.processes = list(processes)
        self.pipes = list(pipes)
        self.lost: str | None = None
        self.on_lost: Callable[[str], None] | None = None
        self._stopping = False
        self._lock = threading.Lock()  # one message at a time on each pipe
        self._watcher = threading.Thread(target=self._watch, name="engine-followers", daemon=True)
        self._watcher.start()

    @classmethod
    def start(cls, specs: Sequence[FollowerSpec]) -> Followers:
        # spawn: a fresh interpreter for each rank (a forked CUDA context cannot be used).
        context = multiprocessing.get_context("spawn")
        processes, pipes = [], []
        for spec in specs:
            ours, theirs = context.Pipe()
            process = context.Process(target=run_follower, args=(spec, theirs), name=f"engine-rank{spec.rank}")
            process.start()
            theirs.close()
            processes.append(process)
            pipes.append(ours)
        log.info("started %d follower ranks: pids %s", len(processes), [p.pid for p in processes])
        return cls(processes, pipes)

    def expect(self, kind: Kind, timeout_s: float) -> list[Any]:
        """One message of `kind` from each follower (their payloads, in rank order); FollowerLost at an
        "error" message, an exit or the deadline."""
        deadline = time.monotonic() + timeout_s
        payloads: dict[int, Any] = {}
        while len(payloads) < len(self.pipes):
            waiting = [pipe for i, pipe in enumerate(self.pipes) if i not in payloads]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FollowerLost(f"followers did not report {kind!r} within {timeout_s:.0f} s")
            ready = wait([*waiting, *(p.sentinel for p in self.processes)], timeout=min(remaining, 1.0))
            for i, pipe in enumerate(self.pipes):
                if i in payloads or pipe not in ready:
                    continue
                try:
                    message = pipe.recv()
                except (EOFError, OSError):
                    raise FollowerLost(f"rank {i + 1} closed its pipe before {kind!r}") from None
                if message.kind == "error":
                    raise FollowerLost(f"rank {i + 1} failed: {message.payload}")
                if message.kind != kind:
                    raise FollowerLost(f"rank {i + 1} said {message.kind!r}, expected {kind!r}")
                payloads[i] = message.payload
            for i, process in enumerate(self.processes):
                if i not in payloads and not process.is_alive() and not self.pipes[i].poll():
                    raise FollowerLost(f"rank {i + 1} exited with status {process.exitcode} before {kind!r}")
        return [payloads[i] for i in range(len(self.pipes))]

    def send(self, message: Message) -> None:
        if self.lost is not None:
            raise FollowerLost(self.lost)
        with self._lock:
            for i, pipe in enumerate(self.pipes):
                try:
                    pipe.send(message)
                except (BrokenPipeError, OSError) as exc:
                    raise FollowerLost(f"rank {i + 1} is gone ({exc})") from None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Tell every follower to stop, wait up to `timeout_s` for all, then kill what is left."""
        self.tell_stop()
        self.wait_stopped(timeout_s)

    def tell_stop(self) -> None:
        self._stopping = True
        with self._lock:
            for pipe in self.pipes:
                try:
                    pipe.send(Message("stop"))
                except (BrokenPipeError, OSError):
                    pass

    def wait_stopped(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for every follower's process to end, then kill what is left."""
        deadline = time.monotonic() + timeout_s
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                log.warning("rank process %s did not stop in %.0f s: killed", process.pid, timeout_s)
                process.kill()
                process.join(5)
        for pipe in self.pipes:
            pipe.close()

    def fail(self, reason: str) -> None:
        """Mark the ranks unusable (reported once, to `on_lost`)."""
        if self.lost is not None or self._stopping:
            return
        self.lost = reason
        log.error("%s: requests cannot run across the engine's ranks any more", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    def _watch(self) -> None:
        sentinels = {process.sentinel: i for i, process in enumerate(self.processes)}
        ended = wait(list(sentinels))
        if self._stopping:
            return
        rank = sentinels[ended[0]] + 1
        self.fail(f"rank {rank} exited with status {self.processes[rank - 1].exitcode}")


def start_leader(
    parallel: ParallelSettings,
    model: str,
    device: str,
    generator_class: Callable[..., FollowerGenerator],
    options: dict[str, Any],
) -> ParallelRank:
    """Rank 0: start ranks 1.. (each makes a `generator_class` of `model` with the generator's `options` and loads
    it), then join them."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise FollowerLost("this process already runs an engine across ranks (one per process)")
    if device == "cuda" and torch.cuda.device_count() < parallel.world_size:
        raise FollowerLost(f"{parallel.world_size} ranks need as many GPUs; torch sees {torch.cuda.device_count()}")
    set_collective_environment()
    port = free_port()
    specs = [
        FollowerSpec(rank, port, parallel, model, device, generator_class, options)
        for rank in range(1, parallel.world_size)
    ]
    followers = Followers.start(specs)
    try:
        followers.expect("joining", parallel.start_timeout_s)
        layout = RankLayout(parallel.cfg_parallel_size, parallel.ulysses_degree, 0)
        groups = join(layout, port, device, parallel.collective_timeout_s)
    except BaseException:
        followers.stop(5.0)
        raise
    return ParallelRank(groups, followers=followers, split_decode=parallel.split_decode)
