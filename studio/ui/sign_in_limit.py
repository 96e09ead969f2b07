"""A limit on guessing passwords at the page's sign-in (Gradio's `POST /login`, where --auth's accounts sign in).

Gradio answers a wrong password at once, as often as it is asked. This middleware stands in front of it: it reads
the form's user name (the body is kept and handed on whole), lets the attempt through, and learns from the answer
whether it failed (Gradio: 400 "Incorrect credentials.", 200 on success). Failures are counted per account from
each client address, and per client address over all accounts. The address is the one uvicorn leaves in the
request's scope (client_address.py): the peer's own, or what a proxy the operator trusts says; never a header a
client writes. After `max_failures` for an account from one address within `window_s` (or `address_max_failures`
from an address, which may be many people behind one NAT), further attempts from that address are answered 429 with
a Retry-After, without reaching Gradio, for a lock that starts at `first_lock_s` and doubles with each failure after
a lock (up to `max_lock_s`) until it has been quiet for a window. The lock binds the address that guessed, not the
account everywhere: whoever guesses at an account cannot lock its owner out (an account-wide lock would let one
request every 15 minutes keep the operator out), and each address still gets only a few guesses. A success clears
the failures of its account from its address (not its address's: an account of one's own must not wipe the record
of guesses at others'). Attempts in flight count against the limit, so many sent at once get no more guesses than
one after another.

Each failure and each lock-out is logged (logger "studio.sign_in") with the account and the address, never the
password. Memory is bounded: quiet entries are forgotten, and past `max_entries` the least recently used unlocked
ones go first.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.ui.client_address import client_address

log = logging.getLogger("studio.sign_in")

LOGIN_PATHS = ("/login",)  # Gradio's POST /login and /login/
MAX_FORM_BYTES = 64 * 1024  # a user name and a password; anything larger is no sign-in form
FAILED = frozenset({400, 401, 403})  # Gradio answers a wrong password 400
NAME_CHARS = 80


def printable(text: str, limit: int = NAME_CHARS) -> str:
    """`text` safe for one log line: no line breaks or control characters, at most `limit` characters."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


@dataclass
class _Entry:
    failures: deque[float] = field(default_factory=deque)  # when each failure within the window was
    pending: int = 0  # attempts let through whose answer has not come yet
    strikes: int = 0  # lock-outs since the entry was last quiet for a window
    locked_until: float = 0.0


@dataclass(frozen=True)
class _Ticket:
    account: str | None
    address: str


class SignInLedger:
    """Failures per account and per address, and the locks they earn. Thread-safe; clock in seconds."""

    @dataclass(frozen=True)
    class Refusal:
        retry_after_s: int
        whose: str  # "account" or "address"

        def detail(self) -> str:
            which = "for this account from this address" if self.whose == "account" else "from this address"
            return f"too many failed sign-ins {which}; try again in {self.retry_after_s} s"

    def __init__(
        self,
        *,
        max_failures: int = 5,
        address_max_failures: int = 20,
        window_s: float = 15 * 60,
        first_lock_s: float = 30,
        max_lock_s: float = 15 * 60,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = {"account": max_failures, "address": address_max_failures}
        self.window_s = window_s
        self.first_lock_s = first_lock_s
        self.max_lock_s = max_lock_s
        self.max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        # ("account", name, address): an account's failures from one address; ("address", "", address): all of an
        # address's failures.
        self._entries: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()

    # ---- the entries ---------------------------------------------------------------------------------------
    def _quiet(self, entry: _Entry, now: float) -> bool:
        """Nothing in flight, no failure within the window, and a window since its last lock ended."""
        recent = bool(entry.failures) and entry.failures[-1] > now - self.window_s
        return not entry.pending and not recent and now >= entry.locked_until + self.window_s

    def _entry(self, key: tuple[str, str, str], now: float) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        else:
            self._entries.move_to_end(key)
        while entry.failures and entry.failures[0] <= now - self.window_s:
            entry.failures.popleft()
        if entry.strikes and now >= entry.locked_until + self.window_s:
            entry.strikes = 0  # quiet for a window since its last lock: it starts afresh
        return entry

    def _forget(self, now: float) -> None:
        """Quiet entries from the least recently used end; then, past the bound, unlocked ones first."""
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if not self._quiet(entry, now):
                break
            del self._entries[key]
        if len(self._entries) <= self.max_entries:
            return
        for key, entry in list(self._entries.items()):
            if len(self._entries) <= self.max_entries:
                return
            if not entry.pending and entry.locked_until <= now:
                del self._entries[key]
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def size(self) -> int:
        with self._lock:
            return len(self._entries)

    def _keys(self, ticket: _Ticket) -> list[tuple[str, str, str]]:
        keys = [("address", "", ticket.address)]
        if ticket.account is not None:
            keys.insert(0, ("account", ticket.account, ticket.address))
        return keys

    # ---- an attempt ----------------------------------------------------------------------------------------
    def begin(self, account: str | None, address: str) -> _Ticket | SignInLedger.Refusal:
        """Whether an attempt for `account` from `address` may go to the login now: a ticket to `finish` with its
        outcome, or the refusal (the longest wait among what is locked)."""
        ticket = _Ticket(account, address)
        with self._lock:
            now = self.clock()
            refusals = []
            entries = []
            for key in self._keys(ticket):
                whose = key[0]
                entry = self._entry(key, now)
                entries.append(entry)
                if entry.locked_until > now:
                    refusals.append(self.Refusal(math.ceil(entry.locked_until - now), whose))
                    continue
                # After a lock, one try at a time until it has been quiet for a window; else what the limit leaves.
                room = 1 if entry.strikes else self.limits[whose] - len(entry.failures)
                if entry.pending >= room:
                    refusals.append(self.Refusal(1, whose))  # its attempts in flight are answered in a moment
            if not refusals:
                for entry in entries:
                    entry.pending += 1
            self._forget(now)
            if refusals:
                return max(refusals, key=lambda refusal: (refusal.retry_after_s, refusal.whose == "account"))
            return ticket

    def finish(self, ticket: _Ticket, failed: bool | None) -> list[str]:
        """The attempt's outcome: True a wrong password, False a success, None neither (no answer, a malformed
        form). Returns what to log of it."""
        said = []
        with self._lock:
            now = self.clock()
            for key in self._keys(ticket):
                whose = key[0]
                entry = self._entry(key, now)
                entry.pending = max(0, entry.pending - 1)
                if failed is None:
                    continue
                if not failed:
                    if whose == "account":
                        del self._entries[key]
                    continue
                entry.failures.append(now)
                if entry.strikes or len(entry.failures) >= self.limits[whose]:
                    lock_s = min(self.first_lock_s * 2**entry.strikes, self.max_lock_s)
                    entry.strikes += 1
                    entry.locked_until = now + lock_s
                    said.append(self._lock_out_line(ticket, whose, lock_s, len(entry.failures)))
            self._forget(now)
        return said

    def _lock_out_line(self, ticket: _Ticket, whose: str, lock_s: float, failures: int) -> str:
        minutes = f"{self.window_s / 60:g} min"
        if whose == "account":
            return (
                f"sign-ins for account {printable(ticket.account or '')!r} from {ticket.address} locked out for "
                f"{lock_s:g} s after {failures} failed in {minutes} (from other addresses it still signs in)"
            )
        return (
            f"sign-ins from address {ticket.address} locked out for {lock_s:g} s after {failures} failed in "
            f"{minutes}, the last for account {printable(ticket.account or '')!r}"
        )


def is_login(scope: Scope) -> bool:
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return False
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/").lower() in LOGIN_PATHS


async def _json(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    content = json.dumps(body).encode()
    start_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": content})


class SignInLimit:
    """ASGI middleware: the ledger above, in front of `POST /login`. Every other request passes untouched."""

    def __init__(self, app: ASGIApp, *, ledger: SignInLedger | None = None, **limits) -> None:
        self.app = app
        self.ledger = ledger or SignInLedger(**limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_login(scope):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nothing was attempted
            body += message.get("body", b"")
            if len(body) > MAX_FORM_BYTES:
                await _json(send, 413, {"detail": "a sign-in form is a user name and a password"})
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        account = await self._account(scope, bytes(body))
        address = client_address(scope)
        ticket = self.ledger.begin(account, address)
        if isinstance(ticket, SignInLedger.Refusal):
            log.info(
                "refused a sign-in for account %r from %s: locked (%s) for %d s more",
                printable(account or ""),
                address,
                ticket.whose,
                ticket.retry_after_s,
            )
            retry = str(ticket.retry_after_s).encode()
            await _json(send, 429, {"detail": ticket.detail()}, [(b"retry-after", retry)])
            return
        status: int | None = None

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, replay, watched)
        finally:
            failed = None if status is None else (True if status in FAILED else (False if status < 300 else None))
            lock_outs = self.ledger.finish(ticket, failed)
            if failed:
                log.warning("failed sign-in for account %r from %s", printable(account or ""), address)
            for line in lock_outs:
                log.warning("%s", line)

    @staticmethod
    async def _account(scope: Scope, body: bytes) -> str | None:
        """The form's user name as the login reads it (the same parser, stripped as Gradio strips it), or None
        where the form cannot be read (the login then refuses it as malformed)."""
        sent = False

        async def once() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        request = Request(scope, once)
        try:
            form = await request.form()  # the limits FastAPI's form reading has: no form one reads and not the other
            try:
                username = form.get("username")
            finally:
                await form.close()
        except Exception:  # a malformed form: Gradio refuses it too
            return None
        return printable(username.strip(), 256) if isinstance(username, str) else None
