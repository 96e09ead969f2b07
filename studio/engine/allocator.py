"""Keep the C allocator from handing large blocks back to the OS between denoising steps (glibc only).

Every step of a CPU pipeline allocates and frees activations of a few MB. Above glibc's mmap threshold each
of those is a fresh mmap, and the kernel zeroes its pages on first touch, every step: the project's small
model spent most of each step there (benchmarks/RESULTS.md, the default model). Raising the mmap threshold to
its maximum and the trim threshold well above a step's working set keeps the blocks in the heap for reuse. What a
long-running engine keeps is its peak working set, which it needs again on the next request; once it has been
idle a while, `release_freed_blocks` hands that back, so an engine between bursts holds only what it uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc refuses more on 64-bit systems
TRIM_THRESHOLD = 1 * 2**30
# Idle this long, an engine hands its freed heap back: a client that sends its requests one after another (polling
# each to its end first) sends the next well within it, so the release stays off the path of a busy queue.
IDLE_RELEASE_AFTER_S = 3.0

_done = False
_malloc_trim: Any = None  # glibc's malloc_trim, once the thresholds hold


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
        return False
    global _malloc_trim
    _malloc_trim = getattr(libc, "malloc_trim", None)
    if _malloc_trim is not None:
        _malloc_trim.argtypes, _malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    _done = True
    return True


def release_freed_blocks() -> bool:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim), where `keep_freed_blocks` kept them; the
    next request touches its working set afresh once. True where any memory went back."""
    if _malloc_trim is None:
        return False
    return bool(_malloc_trim(0))
