"""Process start-up helpers shared by the CLI's commands."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Big imports make many objects and little garbage: the cyclic collector's passes over them only cost
    start-up time (the engine does the same while its model loads)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# What the studio writes (its history and journal, videos, posters, sidecars, exports, logs, the bench's files) is
# its visitors' work and the server's details: readable by the account the studio runs as, not by others on the
# machine. Set once at start, before anything is written; the engine processes it starts inherit it.
PRIVATE_UMASK = 0o077


def private_files() -> None:
    """Files and folders this process (and every process it starts) makes from now on: 0600 and 0700."""
    os.umask(PRIVATE_UMASK)


def private_folder(folder: Path) -> None:
    """`folder` made where missing and kept to its owner (0700), whatever rights it had: what is inside cannot be
    reached by others, even a file copied in with looser rights."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        os.chmod(folder, 0o700)
