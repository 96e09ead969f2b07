"""A follower rank's process (its main, which the leader's side, studio.engine.parallel.leader, spawns): join the
ranks, load the same pipeline on its own device with the generator class the leader sent, then run what the leader
runs, told over its pipe, until told to stop or the leader is gone. What it is started with (`FollowerSpec`) and
what it asks of the generator it runs (`FollowerGenerator`) are declared here, so the generator is never imported."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from studio.engine.generation_types import GenerationParams
from studio.engine.parallel.groups import join, set_collective_environment
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.messages import Message
from studio.engine.parallel.rank import OutOfStep, ParallelRank
from studio.engine.parallel.settings import ParallelSettings

log = logging.getLogger(__name__)


class FollowerGenerator(Protocol):
    """The generator a follower rank runs (studio.engine.generator.VideoGenerator, made from the class the leader
    sends): loaded once, then each of the leader's calls between batches, and its part of every batch."""

    def load(self) -> None: ...

    def close(self) -> None: ...

    def follow_batch(self, params: Sequence[GenerationParams]) -> None: ...

    def set_max_batch(self, max_batch: int) -> None: ...

    def record_shapes(self) -> None: ...

    def capture_graphs(self) -> int: ...

    def graphs_off(self) -> None: ...

    def fall_back_to_eager(self) -> None: ...

    def forget_prompts(self, prefix: str) -> None: ...

    def save_compile_cache(self) -> None: ...

    def set_vae_layout(self, channels_last: bool) -> None: ...


@dataclass(frozen=True)
class FollowerSpec:
    """What a follower needs to stand up its rank (sent to its process, so plain values only; the generator's
    class travels by its name)."""

    rank: int
    port: int
    parallel: ParallelSettings
    model: str
    device: str
    # The leader's generator class: the follower makes one of its own, with the rank it joined as `rank`.
    generator_class: Callable[..., FollowerGenerator]
    generator_options: dict[str, Any] = field(default_factory=dict)  # the generator's keyword arguments


def _exit_with_leader(leader_pid: int) -> None:
    """A follower stuck in a collective cannot read its pipe: it also leaves when its leader process does."""

    def watch() -> None:
        while os.getppid() == leader_pid:
            time.sleep(1.0)
        os._exit(3)  # the leader is gone; nothing of this rank's is worth a clean exit

    threading.Thread(target=watch, name="engine-leader-watch", daemon=True).start()


def run_follower(spec: FollowerSpec, leader: Connection) -> None:
    set_collective_environment()
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s rank {spec.rank} %(name)s: %(message)s",
        stream=sys.stdout,
    )
    _exit_with_leader(os.getppid())
    rank: ParallelRank | None = None
    try:
        import torch

        leader.send(Message("joining"))
        if spec.device == "cuda":
            torch.cuda.set_device(spec.rank)
        layout = RankLayout(spec.parallel.cfg_parallel_size, spec.parallel.ulysses_degree, spec.rank)
        groups = join(layout, spec.port, spec.device, spec.parallel.collective_timeout_s)
        rank = ParallelRank(groups, leader=leader, split_decode=spec.parallel.split_decode)
        generator = spec.generator_class(spec.model, device=spec.device, rank=rank, **spec.generator_options)
        generator.load()
        leader.send(Message("ready"))
    except BaseException as exc:
        log.exception("rank %d could not start", spec.rank)
        try:
            leader.send(Message("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
        raise SystemExit(1) from None
    try:
        follow(generator, leader)
    finally:
        generator.close()
    # Nothing of this rank's is left to finish: ending here skips the interpreter's teardown of CUDA and NCCL
    # state, which can wait on the other ranks.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)


def follow(generator: FollowerGenerator, leader: Connection) -> None:
    """Run the leader's calls in its order; return when told to stop or when the leader's pipe closes."""
    while True:
        try:
            message = leader.recv()
        except (EOFError, OSError):
            log.info("the leader's pipe closed: stopping")
            return
        kind, payload = message.kind, message.payload
        if kind == "stop":
            return
        if kind == "batch":
            generator.follow_batch(payload)
        elif kind == "max_batch":
            generator.set_max_batch(payload)
        elif kind == "record_shapes":
            generator.record_shapes()
        elif kind == "capture_graphs":
            leader.send(Message("captured", generator.capture_graphs()))
        elif kind == "graphs_off":
            generator.graphs_off()
        elif kind == "eager":
            generator.fall_back_to_eager()
        elif kind == "forget_prompts":
            generator.forget_prompts(payload)
        elif kind == "save_cache":
            generator.save_compile_cache()
        elif kind == "vae_layout":
            generator.set_vae_layout(payload)
        else:
            raise OutOfStep(f"a follower between batches was told {kind!r}")
