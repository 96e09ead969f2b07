"""Each visitor's calls in flight, capped: a guard in front of Gradio's queue.

Gradio runs at most 40 events at once (its `max_threads`), whatever an event's `concurrency_limit` says, and an
event holds its worker from the moment it starts until it returns. One visitor who kept 40 events running (waits,
say) froze every other visitor's page. Here each visitor may have at most `visitor_max_calls_in_flight` calls in
flight (the setting, read at each call, so an operator's change applies at once): a call counts from when it joins
the queue (`queue/join` from the page, `call/<api>` from a program) until its event has left Gradio's queue
(finished, failed or cancelled), and `run/<api>` (the endpoint run at once, outside the queue) until its answer is
sent. A call beyond the cap is refused with 429 and the reason, without reaching Gradio; only in a burst (the
visitor was let a call in within the last BURST_S: a page opened in several tabs at once fires a dozen quick
events together) it first waits up to GRACE_S for one of the visitor's own to end, holding nothing of Gradio's.

The visitor is the one the page resolves for the call (an account, a Hugging Face user, a guest; see call_routes),
and the cap binds whom their limits bind: guests of one client address share one, as they share their quota (a
guest who drops its cookie, or a program that names a new session each time, is a new guest of the same party).
Operators are not held to it, as they are held to none of the per-visitor limits: an operator's own scripts must
never lock them out of the Server tab they would use to put things right.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from studio.ui.call_routes import Route, caller_of, gradio_queue, join_event_id, read_body, route_of
from studio.ui.identity import PageAccess

BURST_S = 1.0
GRACE_S = 5.0
GRACE_POLL_S = 0.02
MAX_WAITING_PER_CAP = 4  # calls of one visitor waiting within a burst, per call of the cap
SWEEP_EVERY = 1000  # calls between sweeps of visitors with nothing in flight


def refusal(cap: int) -> str:
    return (
        f"too many calls in flight: a visitor may have at most {cap} calls in flight at once, waits included; "
        "wait for one of yours to finish, then try again (/wait_run answers within "
        "half a minute: ask again while `finished` is false)"
    )


@dataclass
class _Visitor:
    events: set[str] = field(default_factory=set)  # events of theirs in Gradio's queue
    calls: int = 0  # calls being taken (joins not yet answered, run/<api> not yet done)
    waiting: int = 0  # calls waiting for a place within GRACE_S
    taken_at: float = float("-inf")  # when a call of theirs was last let in (time.monotonic)


class CallLedger:
    """Who has what in flight. Used from the event loop only (no lock): a check and its reservation are one step."""

    def __init__(self) -> None:
        self._visitors: dict[str, _Visitor] = {}
        self._since_sweep = 0

    def in_flight(self, key: str, alive: Callable[[str], bool]) -> int:
        entry = self._visitors.get(key)
        if entry is None:
            return 0
        entry.events = {event for event in entry.events if alive(event)}
        return len(entry.events) + entry.calls

    def try_take(self, key: str, cap: int, alive: Callable[[str], bool]) -> bool:
        """A place for one more call of `key`'s, where they have fewer than `cap` in flight."""
        if self.in_flight(key, alive) >= cap:
            return False
        entry = self._visitors.setdefault(key, _Visitor())
        entry.calls += 1
        entry.taken_at = time.monotonic()
        return True

    def in_burst(self, key: str) -> bool:
        entry = self._visitors.get(key)
        return entry is not None and time.monotonic() - entry.taken_at < BURST_S

    def release(self, key: str, event_id: str | None = None) -> None:
        """The call is answered: where it joined the queue, its event counts from now on instead."""
        entry = self._visitors.setdefault(key, _Visitor())
        entry.calls = max(0, entry.calls - 1)
        if event_id:
            entry.events.add(event_id)

    def waiting(self, key: str, delta: int) -> int:
        entry = self._visitors.setdefault(key, _Visitor())
        entry.waiting += delta
        return entry.waiting

    def sweep(self, alive: Callable[[str], bool]) -> None:
        """Forget visitors with nothing in flight, now and then: memory stays bounded by those who have some."""
        self._since_sweep += 1
        if self._since_sweep < SWEEP_EVERY:
            return
        self._since_sweep = 0
        for key in list(self._visitors):
            if self.in_flight(key, alive) == 0 and self._visitors[key].waiting == 0:
                del self._visitors[key]


class CallLimit:
    """ASGI middleware: at most `cap()` calls in flight per visitor (operators excepted)."""

    def __init__(
        self, app: ASGIApp, *, access: PageAccess, cap: Callable[[], int], ledger: CallLedger | None = None
    ) -> None:
        self.app = app
        self.access = access
        self.cap = cap
        self.ledger = ledger or CallLedger()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope)
        if route not in (Route.JOIN, Route.CALL, Route.DIRECT):
            await self.app(scope, receive, send)
            return
        body, receive = await read_body(scope, receive, limit=1 << 30)  # bounded by BodyLimit, in front
        caller = caller_of(scope, self.access, body.session_hash)
        if caller.operator:
            await self.app(scope, receive, send)
            return
        queue = gradio_queue(scope)
        events = getattr(queue, "event_ids_to_events", None)

        def alive(event_id: str) -> bool:
            return events is not None and event_id in events

        cap = max(1, int(self.cap()))
        self.ledger.sweep(alive)
        if not await self._place(caller.party, cap, alive):
            response = JSONResponse({"detail": refusal(cap)}, status_code=429, headers={"Retry-After": "1"})
            await response(scope, receive, send)
            return
        event_id: str | None = None
        try:
            if route is Route.DIRECT:
                await self.app(scope, receive, send)
            else:
                event_id = await join_event_id(self.app, scope, receive, send)
        finally:
            self.ledger.release(caller.party, event_id if event_id and alive(event_id) else None)

    async def _place(self, key: str, cap: int, alive: Callable[[str], bool]) -> bool:
        """Take a place; in a burst, waiting up to GRACE_S for one of the visitor's calls to end."""
        if self.ledger.try_take(key, cap, alive):
            return True
        if not self.ledger.in_burst(key):
            return False
        if self.ledger.waiting(key, +1) > MAX_WAITING_PER_CAP * cap:
            self.ledger.waiting(key, -1)
            return False
        try:
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline:
                await asyncio.sleep(GRACE_POLL_S)
                if self.ledger.try_take(key, cap, alive):
                    return True
            return False
        finally:
            self.ledger.waiting(key, -1)
