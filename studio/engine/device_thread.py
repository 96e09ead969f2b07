"""The one thread that runs everything that touches the model on a GPU."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class DeviceThread:
    """On a GPU every call that runs the model runs on this one thread: cuDNN keeps its chosen kernels per
    thread, so kernels timed at warm-up on another thread would be timed again by the first request. Off a GPU
    (`enabled` False) calls run on the caller's thread."""

    def __init__(self, enabled: bool):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-device") if enabled else None
        self._ident = self._executor.submit(threading.get_ident).result() if self._executor else None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the device thread (at once where the caller is that thread), and its result."""
        if self._executor is None or threading.get_ident() == self._ident:
            return fn(*args)
        return self._executor.submit(fn, *args).result()
