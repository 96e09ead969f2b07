"""This process's rank, as the denoising loop and the generator use it: which half of guidance it runs, its
sequence group, the guidance exchange, and keeping the followers in step with the leader."""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any, Protocol

import torch

from studio.engine.parallel.groups import RankGroups, gather_along_first
from studio.engine.parallel.layout import RankLayout
from studio.engine.parallel.messages import Kind, Message
from studio.engine.parallel.sequence import SequenceGroup


class OutOfStep(RuntimeError):
    """A follower was told something other than what its loop expects: the ranks no longer run in step."""


class FollowerLink(Protocol):
    """Rank 0's hold on its followers' processes (studio.engine.parallel.leader.Followers, which starts them): what
    the leader's rank and its generator ask of them (`send` and `expect` raise FollowerLost where one is gone)."""

    def send(self, message: Message) -> None: ...

    def expect(self, kind: Kind, timeout_s: float) -> list[Any]: ...

    def fail(self, reason: str) -> None: ...

    def tell_stop(self) -> None: ...

    def wait_stopped(self, timeout_s: float) -> None: ...


class ParallelRank:
    """One rank of an engine spread over several: the leader (rank 0) holds `followers`; a follower holds
    `leader`, its pipe from rank 0."""

    def __init__(
        self,
        groups: RankGroups,
        followers: FollowerLink | None = None,
        leader: Connection | None = None,
        split_decode: bool = True,
    ):
        if (followers is None) == (leader is None):
            raise ValueError("a rank is the leader (with followers) or a follower (with its leader's pipe)")
        self.groups = groups
        self.followers = followers
        self.leader = leader
        self.split_decode = split_decode

    @property
    def layout(self) -> RankLayout:
        return self.groups.layout

    @property
    def is_leader(self) -> bool:
        return self.followers is not None

    @property
    def splits_guidance(self) -> bool:
        """Whether the two halves of classifier-free guidance run on two ranks."""
        return self.layout.cfg_size > 1

    @property
    def runs_conditional(self) -> bool:
        return self.layout.cfg_rank == 0

    @property
    def splits_decode(self) -> bool:
        """Whether every rank decodes a strip of each frame (else the leader decodes alone while the others go
        on to the next batch)."""
        return self.split_decode and self.layout.world_size > 1

    def sequence_group(self) -> SequenceGroup | None:
        if self.groups.sequence is None:
            return None
        return SequenceGroup(self.groups.sequence, self.layout.ulysses_rank, self.layout.ulysses_degree)

    def gather_guidance(self, half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's half of the transformer's output -> (conditional, unconditional), the same on both
        ranks of the guidance group, so each makes the same update."""
        both = gather_along_first(half, self.groups.guidance, self.layout.cfg_size)
        return both[0], both[1]

    def tell(self, kind: Kind, payload: Any = None) -> None:
        """The leader tells every follower (a follower's own calls come from its leader: nothing to tell)."""
        if self.followers is not None:
            self.followers.send(Message(kind, payload))

    def agree(self, go_on: bool) -> bool:
        """After each step: the leader's word on whether the loop goes on (it alone sees cancellations)."""
        if self.followers is not None:
            self.followers.send(Message("step", go_on))
            return go_on
        assert self.leader is not None
        message = self.leader.recv()
        if message.kind != "step":
            raise OutOfStep(f"a follower expected the next step, was told {message.kind!r}")
        return bool(message.payload)

    def agree_groups(self, groups: list[list[int]]) -> list[list[int]]:
        """Before a split decode: the leader's decode groups (rows of the batch, it alone sees cancellations)."""
        if self.followers is not None:
            self.followers.send(Message("decode", groups))
            return groups
        assert self.leader is not None
        message = self.leader.recv()
        if message.kind != "decode":
            raise OutOfStep(f"a follower expected the decode groups, was told {message.kind!r}")
        return [list(group) for group in message.payload]

    def gather_strips(self, strip: torch.Tensor, axis: int, widths: list[int]) -> torch.Tensor:
        """Every rank's strip of the frames (rank order, `widths[i]` wide along `axis`) joined into whole frames,
        on every rank. Strips are padded to the widest for the exchange (a collective takes equal shapes)."""
        widest = max(widths)
        if strip.shape[axis] < widest:
            pad = list(strip.shape)
            pad[axis] = widest - strip.shape[axis]
            strip = torch.cat([strip, strip.new_zeros(pad)], dim=axis)
        every = gather_along_first(strip, None, self.layout.world_size)
        return torch.cat([every[i].narrow(axis, 0, width) for i, width in enumerate(widths)], dim=axis)

    def fail(self, reason: str) -> None:
        """The ranks are out of step (a batch failed part-way on the leader): later calls fail at once. A
        follower's failure ends its process, which its leader sees."""
        if self.followers is not None:
            self.followers.fail(reason)

    def close(self, timeout_s: float = 30.0) -> None:
        """The leader tells its followers to stop, leaves the process groups as they leave theirs (NCCL's
        teardown waits for every rank's), then waits for their processes; a follower leaves when told."""
        if self.followers is None:
            self.groups.leave()
            return
        self.followers.tell_stop()
        self.groups.leave()
        self.followers.wait_stopped(timeout_s)
