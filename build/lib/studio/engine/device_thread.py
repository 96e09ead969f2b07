"""The one thread that runs everything that touches the model on a GPU."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def _bind(cuda_index: int | None) -> int:
    if cuda_index is not None:
        import torch

        # The current CUDA device is per thread: "cuda" on this thread means this rank's GPU.
        torch.cuda.set_device(cuda_index)
    return threading.get_ident()


class DeviceThread:
    """On a GPU every call that runs the model runs on this one thread: cuDNN keeps its chosen kernels per
    thread, so kernels timed at warm-up on another thread would be timed again by the first request. Off a GPU
    (`enabled` False) calls run on the caller's thread. `cuda_index`: the GPU this thread's "cuda" is (an
    engine on several GPUs has one per rank); None keeps torch's current one."""

    def __init__(self, enabled: bool, cuda_index: int | None = None):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-device") if enabled else None
        self._ident = self._executor.submit(_bind, cuda_index).result() if self._executor else None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the device thread (at once where the caller is that thread), and its result."""
        if self._executor is None or threading.get_ident() == self._ident:
            return fn(*args)
        return self._executor.submit(fn, *args).result()
