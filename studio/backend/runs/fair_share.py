"""The studio's in-flight slots, shared fairly by its visitors.

A request takes one slot from the moment it is sent to a server until it is settled, so at most `slots` requests
are at the servers at once, all runs and visitors together. Requests waiting for a slot queue per visitor, and a
free slot goes to the visitor served least recently that has work queued (round robin across visitors): one
visitor's 200 queued requests do not make another's single request wait behind them all. With `fair=False` slots
go first come first served instead (the baseline the fair-share benchmark compares against).

Queues, turns and the per-visitor cap are kept by party (Visitor.party): an account's own, while guests of one
client address are one party, so that a person with many guest identities gets one turn, not one per identity.

Thread-safe: runs on different event loops may share one dispatcher; a waiter is woken on its own loop.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from studio.backend.visitors import Visitor

# The default number of slots per server: a batching engine fills its batch (8 on a GPU), a serial one keeps a
# short queue, and nothing a visitor queues later waits behind much more than that.
SLOTS_PER_SERVER = 8


@dataclass(eq=False)
class _Waiter:
    visitor: Visitor
    seq: int  # order of arrival, all visitors together
    future: asyncio.Future[None]
    granted: bool = field(default=False)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FairShare:
    def __init__(self, slots: int, max_in_flight_per_visitor: int | None = None, fair: bool = True):
        if slots < 1:
            raise ValueError(f"the studio needs at least one in-flight slot, got {slots}")
        self.slots = slots
        self.max_in_flight_per_visitor = max_in_flight_per_visitor
        self.fair = fair
        self._queues: dict[str, deque[_Waiter]] = {}
        self._in_flight: Counter[str] = Counter()
        self._last_served: dict[str, int] = {}  # party -> the grant that last served them
        self._grants = itertools.count()
        self._arrivals = itertools.count()
        self._lock = threading.Lock()

    # ---- reading -----------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(self._in_flight.values())

    def in_flight_by_visitor(self) -> Counter[str]:
        with self._lock:
            return +self._in_flight

    def queued_by_visitor(self) -> Counter[str]:
        with self._lock:
            return Counter({vid: len(queue) for vid, queue in self._queues.items() if queue})

    def served_before(self, visitor_id: str, count: int) -> Counter[str]:
        """Other parties' queued requests that get a slot before the `count`-th request the party `visitor_id`
        (a Visitor.party) queues now, by party (the dispatch order as it stands; later arrivals aside)."""
        with self._lock:
            others = {vid: queue for vid, queue in self._queues.items() if queue and vid != visitor_id}
            if not self.fair:
                mine = self._queues.get(visitor_id)
                last = mine[min(count, len(mine)) - 1].seq if mine and count > 0 else None
                return Counter(
                    {vid: sum(1 for w in queue if last is None or w.seq < last) for vid, queue in others.items()}
                )
            my_turn = self._turn_key(visitor_id)
            # Round robin: a visitor whose turn comes before mine is served once more than the others, per round.
            return Counter(
                {
                    vid: min(len(queue), count if self._turn_key(vid) < my_turn else max(0, count - 1))
                    for vid, queue in others.items()
                }
            )

    # ---- slots -------------------------------------------------------------------------------------
    @asynccontextmanager
    async def slot(self, visitor: Visitor) -> AsyncIterator[None]:
        """Hold one in-flight slot for `visitor` while the block runs; waits its turn for it."""
        await self._acquire(visitor)
        try:
            yield
        finally:
            self._release(visitor)

    def set_slots(self, slots: int) -> None:
        """More (or fewer) slots from now on, e.g. once the studio knows how many servers it has."""
        if slots < 1:
            raise ValueError(f"the studio needs at least one in-flight slot, got {slots}")
        with self._lock:
            self.slots = slots
            self._grant_locked()

    async def _acquire(self, visitor: Visitor) -> None:
        waiter = _Waiter(visitor, next(self._arrivals), asyncio.get_running_loop().create_future())
        with self._lock:
            self._queues.setdefault(visitor.party, deque()).append(waiter)
            self._grant_locked()
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter.granted:  # granted as it was cancelled: the slot goes to the next one
                    self._in_flight[visitor.party] -= 1
                else:
                    queue = self._queues[visitor.party]
                    queue.remove(waiter)
                    if not queue:
                        del self._queues[visitor.party]
                self._grant_locked()
            raise

    def _release(self, visitor: Visitor) -> None:
        with self._lock:
            self._in_flight[visitor.party] -= 1
            self._grant_locked()

    def _may_send(self, visitor: Visitor) -> bool:
        limit = self.max_in_flight_per_visitor
        return visitor.operator or limit is None or self._in_flight[visitor.party] < limit

    def _turn_key(self, visitor_id: str) -> tuple[int, int]:
        """Lowest goes first: the visitor served least recently (never: first), then the earliest waiting."""
        queue = self._queues.get(visitor_id)
        return (self._last_served.get(visitor_id, -1), queue[0].seq if queue else -1)

    def _grant_locked(self) -> None:
        while sum(self._in_flight.values()) < self.slots:
            eligible = [vid for vid, queue in self._queues.items() if queue and self._may_send(queue[0].visitor)]
            if not eligible:
                return
            if self.fair:
                chosen = min(eligible, key=self._turn_key)
            else:
                chosen = min(eligible, key=lambda vid: self._queues[vid][0].seq)
            queue = self._queues[chosen]
            waiter = queue.popleft()
            if not queue:
                del self._queues[chosen]
            waiter.granted = True
            self._in_flight[chosen] += 1
            self._last_served[chosen] = next(self._grants)
            loop = waiter.future.get_loop()
            if loop.is_closed():
                self._in_flight[chosen] -= 1  # its loop is gone, and its task with it
                continue
            loop.call_soon_threadsafe(_wake, waiter.future)


@dataclass(frozen=True)
class Standing:
    """Where a visitor's work stands in the studio: what the page shows beside their requests."""

    queued: int  # theirs, waiting in the studio
    in_flight: int  # theirs, at a server
    ahead: int  # others' requests that go before their last queued one: at the servers, or served first in turn
    visitors_ahead: int  # whose those are
    eta_s: float | None  # until their last request is done, from recent inference times (None: no estimate yet)

    def __str__(self) -> str:
        parts = [f"{self.queued} of yours queued"]
        if self.in_flight:
            parts[0] += f", {self.in_flight} at a server"
        if self.ahead:
            people = f"{self.visitors_ahead} visitor{'s' * (self.visitors_ahead != 1)}"
            parts.append(f"{self.ahead} request{'s' * (self.ahead != 1)} ahead across {people}")
        elif self.queued:
            parts.append("next in turn")
        if self.queued or self.in_flight:
            parts.append("no estimate yet" if self.eta_s is None else f"about {self.eta_s:.0f} s")
        return "; ".join(parts)


class VisitorLimitExceeded(RuntimeError):
    """A run that would take a visitor past one of their limits; the message names the limit and its value."""
