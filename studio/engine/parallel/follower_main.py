"""A follower rank's process (its main, which the leader's side, studio.engine.parallel.leader, spawns): join the
ranks, load the same pipeline on its own device with the generator class the leader sent, then run what the leader
runs, told over its pipe, until told to stop or the leader is gone."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from studio.engine.parallel.groups import join, set_collective_environment
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.messages import Message
from studio.engine.parallel.rank import OutOfStep, ParallelRank

if TYPE_CHECKING:
    from studio.engine.generator import VideoGenerator
    from studio.engine.parallel.leader import FollowerSpec

log = logging.getLogger(__name__)


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


def follow(generator: VideoGenerator, leader: Connection) -> None:
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
