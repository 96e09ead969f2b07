"""How one request is spread over ranks: the engine's width settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParallelSettings:
    """`cfg_parallel_size` 2: the conditional and unconditional halves of classifier-free guidance on two
    ranks; `ulysses_degree` N: each rank holds 1/N of the tokens. Ranks: their product."""

    cfg_parallel_size: int = 1
    ulysses_degree: int = 1
    # Followers joining the process groups and loading the pipeline; past it the engine does not start.
    start_timeout_s: float = 900.0
    # Longest any one collective may wait for the other ranks (a first compile on one rank holds the others).
    collective_timeout_s: float = 1800.0
    # Every rank decodes a strip of each frame (studio.engine.parallel.split_decode); off: the leader decodes
    # alone while the other ranks go on to the next batch.
    split_decode: bool = True

    def __post_init__(self) -> None:
        if self.cfg_parallel_size not in (1, 2):
            raise ValueError(f"cfg parallel size must be 1 or 2, got {self.cfg_parallel_size}")
        if self.ulysses_degree < 1:
            raise ValueError(f"ulysses degree must be at least 1, got {self.ulysses_degree}")
        if self.start_timeout_s <= 0 or self.collective_timeout_s <= 0:
            raise ValueError("parallel timeouts must be positive")

    @property
    def world_size(self) -> int:
        return self.cfg_parallel_size * self.ulysses_degree

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @classmethod
    def of(cls, settings: Any) -> ParallelSettings:
        """From the engine's settings object (fields `cfg_parallel_size`, `ulysses_degree`,
        `parallel_start_timeout_s`; one rank where it has none)."""
        return cls(
            cfg_parallel_size=int(getattr(settings, "cfg_parallel_size", 1) or 1),
            ulysses_degree=int(getattr(settings, "ulysses_degree", 1) or 1),
            start_timeout_s=float(getattr(settings, "parallel_start_timeout_s", None) or cls.start_timeout_s),
            split_decode=bool(getattr(settings, "split_vae_decode", True)),
        )
