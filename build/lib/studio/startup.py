"""Process start-up helpers shared by the CLI's commands."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Big imports make many objects and little garbage: the cyclic collector's passes over them only cost
    start-up time (the engine does the same while its model loads)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
