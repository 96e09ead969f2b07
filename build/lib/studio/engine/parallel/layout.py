"""Which rank does what: rank = cfg_rank * ulysses_degree + ulysses_rank."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankLayout:
    """One rank's place among `cfg_size x ulysses_degree` ranks. The ranks of one guidance half form a
    sequence (Ulysses) group; the ranks that hold the same tokens of the two halves form a guidance group."""

    cfg_size: int
    ulysses_degree: int
    rank: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside 0..{self.world_size - 1}")

    @property
    def world_size(self) -> int:
        return self.cfg_size * self.ulysses_degree

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def cfg_rank(self) -> int:
        """0: this rank runs the conditional half of guidance; 1: the unconditional one."""
        return self.rank // self.ulysses_degree

    @property
    def ulysses_rank(self) -> int:
        """Which share of the tokens this rank holds."""
        return self.rank % self.ulysses_degree

    def sequence_groups(self) -> list[list[int]]:
        """Every sequence group, in the order each rank creates them (one per guidance half)."""
        u = self.ulysses_degree
        return [[c * u + i for i in range(u)] for c in range(self.cfg_size)]

    def guidance_groups(self) -> list[list[int]]:
        """Every guidance group, in creation order (one per token share); a group's rank i runs half i."""
        u = self.ulysses_degree
        return [[c * u + i for c in range(self.cfg_size)] for i in range(u)]
