"""How many new guests each client address may start: a guest is free to make (drop the cookie, or call the API with
a new session), so one address could make thousands, each with its own history, its own uploads and its own page
state. Guests of one address already share their quota and their turn (Visitor.party); this bounds how many new
identities an address may start in an hour (new_guests_per_address_per_hour). Beyond it, a new guest is refused and
nothing of it is recorded; guests the studio knows already carry on.

In memory only, by party (a keyed hash of the address) and guest id: no raw address is kept. A guest is "known" from
its first admitted event until it has been idle for `max_idle_s` or pushed out past `max_known` (least recently seen
first); a guest known before a restart counts as new once after it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from studio.backend.visitors import Visitor

HOUR_S = 3600.0
SWEEP_S = 60.0  # how often every address's arrivals are swept of old ones (the asking address's are, at each call)


class GuestArrivals:
    """Thread-safe; `per_hour` is read at each arrival (an operator may change it while the studio serves)."""

    def __init__(
        self,
        per_hour: Callable[[], int],
        *,
        window_s: float = HOUR_S,
        max_idle_s: float = 24 * HOUR_S,
        max_known: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_hour = per_hour
        self.window_s = window_s
        self.max_idle_s = max_idle_s
        self.max_known = max_known
        self.clock = clock
        self._lock = threading.Lock()
        self._known: OrderedDict[str, float] = OrderedDict()  # guest id -> when last seen
        self._arrivals: dict[str, deque[float]] = {}  # party -> when each of its new guests came, within the window
        self._swept = float("-inf")

    def admit(self, visitor: Visitor) -> bool:
        """Whether `visitor` (a guest) may act: a guest seen before, or a new one its address has room for (then
        recorded). Never refuses accounts or operators."""
        if not visitor.id.startswith("guest:"):
            return True
        with self._lock:
            now = self.clock()
            self._forget(now)
            if visitor.id in self._known:
                self._known[visitor.id] = now
                self._known.move_to_end(visitor.id)
                return True
            arrivals = self._arrivals.get(visitor.party)
            while arrivals and arrivals[0] <= now - self.window_s:
                arrivals.popleft()
            if arrivals is not None and len(arrivals) >= self.per_hour():
                return False
            self._arrivals.setdefault(visitor.party, deque()).append(now)
            self._known[visitor.id] = now
            return True

    def _forget(self, now: float) -> None:
        while self._known:
            guest, seen = next(iter(self._known.items()))
            if seen > now - self.max_idle_s and len(self._known) <= self.max_known:
                break
            del self._known[guest]
        if now < self._swept + SWEEP_S:
            return
        self._swept = now
        for party in list(self._arrivals):
            arrivals = self._arrivals[party]
            while arrivals and arrivals[0] <= now - self.window_s:
                arrivals.popleft()
            if not arrivals:
                del self._arrivals[party]

    def refusal(self) -> str:
        """What a guest refused here is told."""
        return (
            f"too many new guests from your address in the last hour (at most {self.per_hour()}, "
            "new_guests_per_address_per_hour): keep using the browser you started with (its cookie is who you are "
            "here), or try again later"
        )
