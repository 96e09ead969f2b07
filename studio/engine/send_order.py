"""The order in which a client sent its jobs, kept by the queue even where the POSTs arrive out of it.

A studio sends several POSTs to one server side by side; on a busy machine the later one can reach the queue
first, and a visitor's prompt 2 then starts before prompt 1. Each POST may carry `X-Omni-Studio-Order:
STREAM.SEQ` (one stream per client, its sequence counting 0, 1, 2, ... in the order it sent them). The queue puts
a job before the queued jobs of its stream with a larger sequence, and holds a stream's next job back for at most
`hold_s` while one sent before it is still on its way. A POST without the header is queued as it arrives.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from dataclasses import dataclass

_ORDER_VALUE = re.compile(r"^([A-Za-z0-9_-]{1,64})\.(\d{1,12})$")
MAX_STREAMS = 1024  # streams remembered; the oldest is forgotten first


@dataclass(frozen=True)
class SendPlace:
    stream: str
    seq: int


def parse_order(value: str | None) -> SendPlace | None:
    """The header's place; None where it is absent or malformed (the job is then queued as it arrives)."""
    match = _ORDER_VALUE.match((value or "").strip())
    return SendPlace(match.group(1), int(match.group(2))) if match else None


class SendOrder:
    """Per stream, the next sequence not yet arrived. Not thread-safe: the queue calls it under its own lock."""

    def __init__(self, hold_s: float = 1.0):
        self.hold_s = hold_s
        self._next: OrderedDict[str, int] = OrderedDict()  # stream -> lowest sequence not yet arrived
        self._arrived: dict[str, set[int]] = {}  # stream -> sequences above it that arrived already

    def arrived(self, place: SendPlace) -> None:
        """A job of this place reached the server (queued, or refused at once: either way it is not coming)."""
        expected = self._next.get(place.stream, 0)
        self._next[place.stream] = expected
        self._next.move_to_end(place.stream)
        if place.seq >= expected:
            ahead = self._arrived.setdefault(place.stream, set())
            ahead.add(place.seq)
            while expected in ahead:
                ahead.discard(expected)
                expected += 1
            self._next[place.stream] = expected
        while len(self._next) > MAX_STREAMS:
            stream, _ = self._next.popitem(last=False)
            self._arrived.pop(stream, None)

    def missing_before(self, place: SendPlace) -> bool:
        """Whether a job its stream sent before it has not arrived yet."""
        return self._next.get(place.stream, 0) < place.seq

    def give_up_before(self, place: SendPlace) -> None:
        """The jobs sent before this one are not coming (lost, or sent before this server started)."""
        ahead = self._arrived.setdefault(place.stream, set())
        expected = max(self._next.get(place.stream, 0), place.seq)
        while expected in ahead:
            ahead.discard(expected)
            expected += 1
        ahead.difference_update({seq for seq in ahead if seq < expected})
        self._next[place.stream] = expected

    def hold_until(self, place: SendPlace, queued_at: float) -> float | None:
        """time.monotonic() until which a job at the head waits for one sent before it; None where it need not."""
        if not self.missing_before(place):
            return None
        until = queued_at + self.hold_s
        if until <= time.monotonic():
            self.give_up_before(place)
            return None
        return until
