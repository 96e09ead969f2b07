"""Inductor's reductions along rows kept in registers up to a width (its own choice loops over rows wider than
1,024 elements, loading the row again for each reduction in the kernel). The engine keeps inductor's choice; the
benchmarks compare the two (benchmarks/experiments/wide_rows_gpu.py per pass, benchmarks/gpu/levers_gpu.py end to end)."""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor import config
from torch._inductor.choices import InductorChoices
from torch._inductor.runtime.hints import ReductionHint
from torch._inductor.virtualized import V

# Rows up to this many elements reduced in registers: Wan 1.3B's 1,536 and a 2B model's 2,048.
ROW_LIMIT = 2048


class WideRowChoices(InductorChoices):
    """Inductor's heuristics, with reductions along rows of up to `limit` elements kept in registers. At module
    level, so that the compile cache's key can name it (it asks `uuid`, or pickles the setting)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def should_use_persistent_reduction(self, features: Any, cooperative_reduction: bool) -> bool:
        if InductorChoices.should_use_persistent_reduction(features, cooperative_reduction):
            return True
        # Only whole rows that one program reduces alone: an inner reduction, not one split across programs.
        if not config.triton.persistent_reductions or cooperative_reduction:
            return False
        if features.get_reduction_hint() != ReductionHint.INNER:
            return False
        return bool(V.graph.sizevars.statically_known_leq(features.reduction_numel, self.limit))

    def uuid(self) -> str:
        return f"wide-rows-{self.limit}"


def use(limit: int) -> None:
    """Compile reductions along rows of up to `limit` elements as persistent kernels from now on (0: inductor's
    own choice), on this thread: torch keeps its compile settings and its heuristics per thread."""
    factory = functools.partial(WideRowChoices, limit) if limit else None
    config.inductor_choices_class = factory
    V.set_choices_handler(factory() if factory else InductorChoices())
