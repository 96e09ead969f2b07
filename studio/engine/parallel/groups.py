"""The process groups of one engine's ranks: joining them, the collectives the engine runs on them, leaving."""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from studio.engine.parallel.layout import RankLayout

log = logging.getLogger(__name__)

# NVLink multicast (NVLS) stays off in every process of the engine: it takes memory on each GPU and its
# buffers are set up per communicator, for collectives larger than these ranks exchange.
NCCL_ENVIRONMENT = {"NCCL_NVLS_ENABLE": "0"}
# Longest a rank waits to leave its process groups when the engine stops.
LEAVE_TIMEOUT_S = 15.0


def set_collective_environment() -> None:
    """Before any process group or follower starts (followers inherit it)."""
    os.environ.update(NCCL_ENVIRONMENT)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the rendezvous of the ranks."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RankGroups:
    """This rank's groups: its sequence group (None with one share of the tokens) and its guidance group
    (None without guidance split across ranks)."""

    layout: RankLayout
    sequence: Any
    guidance: Any
    backend: str

    def leave(self, timeout_s: float = LEAVE_TIMEOUT_S) -> bool:
        """Leave the process groups; False where that did not end within `timeout_s` (then the process goes
        on regardless: it is stopping). NCCL's teardown may wait for the other ranks to tear down theirs, so
        every rank leaves at about the same time (ParallelRank.close)."""
        if not dist.is_initialized():
            return True
        done = threading.Event()

        def destroy() -> None:
            try:
                dist.destroy_process_group()
            except Exception as exc:  # stopping anyway: say so, never raise from here
                log.warning("rank %d left its process groups with an error: %s", self.layout.rank, exc)
            finally:
                done.set()

        threading.Thread(target=destroy, name="engine-leave-ranks", daemon=True).start()
        if done.wait(timeout_s):
            return True
        log.warning("rank %d did not leave its process groups within %.0f s: going on", self.layout.rank, timeout_s)
        return False


def join(layout: RankLayout, port: int, device: str, timeout_s: float) -> RankGroups:
    """Join the ranks' rendezvous on 127.0.0.1:`port` (rank 0 holds it) and make the groups; waits for every
    rank, up to `timeout_s` (which also bounds each collective later)."""
    if not dist.is_available():
        raise RuntimeError("this torch has no torch.distributed: one request cannot run on several ranks")
    set_collective_environment()
    backend = "nccl" if device == "cuda" else "gloo"
    # NCCL bound to this rank's GPU now: its communicators are made here, at start-up, not by a first request.
    bound = {"device_id": torch.device("cuda", torch.cuda.current_device())} if backend == "nccl" else {}
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=layout.rank,
        world_size=layout.world_size,
        timeout=timedelta(seconds=timeout_s),
        **bound,
    )
    # Every rank makes every group, in one order (torch.distributed requires it), and keeps its own.
    sequence = guidance = None
    if layout.ulysses_degree > 1:
        for ranks in layout.sequence_groups():
            group = dist.new_group(ranks)
            if layout.rank in ranks:
                sequence = group
    if layout.cfg_size > 1:
        for ranks in layout.guidance_groups():
            group = dist.new_group(ranks)
            if layout.rank in ranks:
                guidance = group
    log.info(
        "rank %d of %d joined (%s): guidance half %d, token share %d",
        layout.rank,
        layout.world_size,
        backend,
        layout.cfg_rank,
        layout.ulysses_rank,
    )
    return RankGroups(layout, sequence, guidance, backend)


def gather_along_first(tensor: torch.Tensor, group: Any, size: int) -> torch.Tensor:
    """(size, *tensor.shape): every rank's `tensor` of the group, in group-rank order (eager)."""
    tensor = tensor.contiguous()
    # Gathered along the first dimension (the one layout every backend takes), then viewed per rank.
    out = tensor.new_empty((size * tensor.shape[0], *tensor.shape[1:]))
    # torch renamed all_gather_into_tensor to all_gather_single; older releases have only the first.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, tensor, group=group)
    return out.view(size, *tensor.shape)
