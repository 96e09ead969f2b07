"""Keep the C allocator from handing large blocks back to the OS between denoising steps (glibc only).

Every step of a CPU pipeline allocates and frees activations of a few MB. Above glibc's mmap threshold each
of those is a fresh mmap, and the kernel zeroes its pages on first touch, every step: the project's small
model spent most of each step there (benchmarks/RESULTS.md, the default model). Raising the mmap threshold to
its maximum and the trim threshold well above a step's working set keeps the blocks in the heap for reuse. What a
long-running engine keeps is its peak working set, which it needs again on the next request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc refuses more on 64-bit systems
TRIM_THRESHOLD = 1 * 2**30

_done = False


def keep_freed_blocks() -> bool:
    """Apply the thresholds once per process; False where the C library is not glibc (nothing changes)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.info("the C library refused the allocator thresholds; CPU steps may run slower")
    _done = ok
    return ok
