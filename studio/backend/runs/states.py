"""The states a request goes through in the studio: a module of its own, light to import, for the parts that
need the names alone (the output store's queries; the CLI's before its engine starts)."""

from __future__ import annotations

from enum import StrEnum


class RequestState(StrEnum):
    WAITING = "waiting"  # in the studio, for a free slot
    QUEUED = "queued"  # at the server, not started
    RUNNING = "running"
    DOWNLOADING = "downloading"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RequestState.DONE, RequestState.FAILED, RequestState.CANCELLED)
