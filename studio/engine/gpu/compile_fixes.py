"""A torch.compile bug that a warm restart meets, mended for the torch versions that have it.

With the compiler's kernel tuning on (`coordinate_descent_tuning`, the engine's `--tune-kernels`), a kernel
loaded from the FX graph cache asks its autotune cache for the block sizes an earlier start picked
(`CachingAutotuner.recheck_autotune_cache`). Before torch 2.12 that lookup drops the pick for every kernel
with a single candidate configuration, and drops its "found by tuning" mark for the others (pytorch/pytorch
issue 172819, fixed by pull request 173391), so every start times every kernel's block sizes again, for each
warmed shape: most of a warm restart (benchmarks/RESULTS.md, warm restarts). The mend runs after
torch's own lookup and applies the cached pick as the fixed torch does; torch has no public setting for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

FIXED_IN = (2, 12)
_applied = False


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def cached_pick(
    compile_results: Sequence[Any], cached_configs: Sequence[Any], hashable: Callable[[Any], Hashable]
) -> tuple[list[Any] | None, Any]:
    """What a kernel should launch with, given the autotune cache's answer for its candidate configurations:
    (the compile results narrowed to the cached pick, None) where one of them is it, marked as found by
    tuning; (None, the pick) where the pick was found by tuning and is none of them (it must be compiled);
    (None, None) where the cache has no tuned pick (torch's own path stands)."""
    if len(cached_configs) != 1 or not getattr(cached_configs[0], "found_by_coordesc", False):
        return None, None
    best = cached_configs[0]
    for result in compile_results:
        if hashable(result.config) == hashable(best):
            result.config.found_by_coordesc = True
            return [result], None
    return None, best


def keep_cached_kernel_tuning() -> bool:
    """Mend the lookup where this torch has the bug (once per process). True where it is now mended."""
    global _applied
    if _applied:
        return True
    if torch_version() >= FIXED_IN or not torch.cuda.is_available():
        return False
    try:
        from torch._inductor.runtime.runtime_utils import triton_config_to_hashable
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner, check_autotune_cache
    except ImportError as exc:  # another layout of torch's internals: the lookup stays as torch has it
        log.info("the kernel tuning cache lookup is left as torch has it: %s", exc)
        return False
    lookup = CachingAutotuner.recheck_autotune_cache

    def recheck_autotune_cache(self: Any, reload_kernel_from_src: Callable[[], Any]) -> None:
        candidates = [result.config for result in self.compile_results]
        lookup(self, reload_kernel_from_src)
        if not self.inductor_meta.get("coordinate_descent_tuning"):
            return
        cached, _, _ = check_autotune_cache(candidates, self.filename, self.inductor_meta)
        narrowed, to_compile = cached_pick(self.compile_results, cached, triton_config_to_hashable)
        if narrowed is not None:
            self.compile_results = narrowed
        elif to_compile is not None:
            if self.fn.fn is None:
                self.fn = reload_kernel_from_src().fn
            self.compile_results = [self._precompile_config(to_compile)]

    CachingAutotuner.recheck_autotune_cache = recheck_autotune_cache
    _applied = True
    log.info("torch %s: kernel tuning picks are read back from the compile cache", torch.__version__)
    return True
