"""The sign-in limit in front of a tiny stand-in for Gradio's `POST /login` (200 on the right password, 400
"Incorrect credentials." otherwise), with a clock the tests move by hand. Each request comes from the peer address
the test names (what uvicorn leaves in the scope), or from the test client's own."""

from __future__ import annotations

import logging
import threading

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from studio.ui.sign_in_limit import SignInLedger, SignInLimit

PASSWORDS = {"alice": "alice-right", "bob": "bob-right"}
WRONG = "hunter2-wrong"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LoginApp:
    """What Gradio's login route answers, and what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.app = Starlette(
            routes=[
                Route("/login", self.login, methods=["POST"]),
                Route("/login/", self.login, methods=["POST"]),
                Route("/other", self.other, methods=["POST"]),
            ]
        )

    async def login(self, request: Request):
        form = await request.form()
        username, password = str(form.get("username", "")).strip(), str(form.get("password", ""))
        self.seen.append((username, password))
        if PASSWORDS.get(username) == password:
            return JSONResponse({"success": True})
        return JSONResponse({"detail": "Incorrect credentials."}, status_code=400)

    async def other(self, request: Request):
        return PlainTextResponse((await request.body()).decode())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def login_app() -> LoginApp:
    return LoginApp()


class Peer:
    """Stands for the connection: the request's peer address is what the test's `X-Test-Peer` says."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"x-test-peer":
                scope = {**scope, "client": (value.decode(), 40000)}
        await self.app(scope, receive, send)


def studio(login_app: LoginApp, clock: Clock, **limits) -> TestClient:
    return TestClient(Peer(SignInLimit(login_app.app, clock=clock, **limits)))


def sign_in(
    client: TestClient, user: str, password: str, address: str | None = None, path: str = "/login", **headers: str
):
    if address:
        headers["X-Test-Peer"] = address
    return client.post(path, data={"username": user, "password": password}, headers=headers)


def test_five_wrong_passwords_lock_the_account_from_that_address_and_the_right_one_is_refused_too(login_app, clock):
    client = studio(login_app, clock)
    for _ in range(5):
        assert sign_in(client, "alice", WRONG).status_code == 400
    locked = sign_in(client, "alice", WRONG)
    assert locked.status_code == 429
    assert locked.json() == {"detail": "too many failed sign-ins for this account from this address; try again in 30 s"}
    assert locked.headers["retry-after"] == "30"
    assert sign_in(client, "alice", PASSWORDS["alice"]).status_code == 429
    assert sign_in(client, " alice ", PASSWORDS["alice"]).status_code == 429  # Gradio strips the name too
    assert len(login_app.seen) == 5  # the refused ones never reached the login
    # The lock is the account's: another account signs in from the same address.
    assert sign_in(client, "bob", PASSWORDS["bob"]).status_code == 200

    clock.advance(29)
    assert sign_in(client, "alice", PASSWORDS["alice"]).headers["retry-after"] == "1"
    clock.advance(1)
    assert sign_in(client, "alice", PASSWORDS["alice"]).status_code == 200


def test_the_lock_grows_with_each_failure_after_it_up_to_a_cap(login_app, clock):
    client = studio(login_app, clock)
    for _ in range(5):
        sign_in(client, "alice", WRONG)
    waits = []
    for _ in range(8):
        locked = sign_in(client, "alice", WRONG)
        assert locked.status_code == 429
        waits.append(int(locked.headers["retry-after"]))
        clock.advance(waits[-1])
        assert sign_in(client, "alice", WRONG).status_code == 400  # one more try once the lock is over
    assert waits == [30, 60, 120, 240, 480, 900, 900, 900]


def test_a_success_forgets_the_accounts_failures(login_app, clock):
    client = studio(login_app, clock)
    for _ in range(4):
        sign_in(client, "alice", WRONG)
    assert sign_in(client, "alice", PASSWORDS["alice"]).status_code == 200
    for _ in range(4):
        assert sign_in(client, "alice", WRONG).status_code == 400
    assert sign_in(client, "alice", WRONG).status_code == 400
    assert sign_in(client, "alice", WRONG).status_code == 429


def test_failures_older_than_the_window_no_longer_count(login_app, clock):
    client = studio(login_app, clock)
    for _ in range(4):
        sign_in(client, "alice", WRONG)
    clock.advance(15 * 60 + 1)
    for _ in range(4):
        assert sign_in(client, "alice", WRONG).status_code == 400
    assert sign_in(client, "alice", PASSWORDS["alice"]).status_code == 200


def test_an_address_that_tries_many_accounts_is_locked_and_others_are_not(login_app, clock):
    client = studio(login_app, clock)
    for number in range(19):  # a password sprayed over many accounts: each account fails once
        assert sign_in(client, f"user{number}", WRONG, address="203.0.113.9").status_code == 400
    # An account of the sprayer's own that signs in does not clear the address's failures with others.
    assert sign_in(client, "bob", PASSWORDS["bob"], address="203.0.113.9").status_code == 200
    assert sign_in(client, "user19", WRONG, address="203.0.113.9").status_code == 400
    locked = sign_in(client, "alice", PASSWORDS["alice"], address="203.0.113.9")
    assert locked.status_code == 429
    assert locked.json()["detail"] == "too many failed sign-ins from this address; try again in 30 s"
    assert locked.headers["retry-after"] == "30"
    # Another address is not locked.
    assert sign_in(client, "alice", PASSWORDS["alice"], address="198.51.100.7").status_code == 200
    assert sign_in(client, "alice", PASSWORDS["alice"]).status_code == 200


def test_a_guesser_cannot_lock_the_owner_out_of_her_account(login_app, clock):
    """One request every lock keeps alice's account locked for the guesser's address, never for alice's."""
    client = studio(login_app, clock)
    for _ in range(5):
        assert sign_in(client, "alice", WRONG, address="203.0.113.9").status_code == 400
    assert sign_in(client, "alice", PASSWORDS["alice"], address="203.0.113.9").status_code == 429
    for _ in range(6):  # the lock doubles for the guesser, up to 15 min...
        clock.advance(int(sign_in(client, "alice", WRONG, address="203.0.113.9").headers["retry-after"]))
        assert sign_in(client, "alice", WRONG, address="203.0.113.9").status_code == 400
        # ...while alice, from her own address, signs in throughout.
        assert sign_in(client, "alice", PASSWORDS["alice"], address="198.51.100.7").status_code == 200


def test_a_forwarded_header_names_no_address_of_its_own(login_app, clock):
    """30 accounts guessed from one peer, each request with its own X-Forwarded-For: the peer is locked after 20
    (the header is uvicorn's to read, and only from proxies the operator trusts)."""
    client = studio(login_app, clock)
    answers = [
        sign_in(client, f"user{n}", WRONG, address="203.0.113.9", **{"X-Forwarded-For": f"198.51.100.{n}"}).status_code
        for n in range(30)
    ]
    assert answers == [400] * 20 + [429] * 10


def test_the_form_reaches_the_login_whole_in_either_encoding(login_app, clock):
    client = studio(login_app, clock)
    assert sign_in(client, "alice", PASSWORDS["alice"], path="/login/").status_code == 200
    multipart = client.post("/login", files={"username": (None, "bob"), "password": (None, PASSWORDS["bob"])})
    assert multipart.status_code == 200
    assert login_app.seen == [("alice", PASSWORDS["alice"]), ("bob", PASSWORDS["bob"])]
    # A multipart form counts against its account like any other.
    for _ in range(5):
        client.post("/login", files={"username": (None, "bob"), "password": (None, WRONG)})
    assert sign_in(client, "bob", PASSWORDS["bob"]).status_code == 429
    # Other routes are left alone, their bodies too.
    assert client.post("/other", content=b"x" * 100_000).text == "x" * 100_000
    assert client.get("/login").status_code == 405


def test_a_login_form_too_large_to_be_one_is_refused(login_app, clock):
    client = studio(login_app, clock)
    answer = client.post("/login", data={"username": "alice", "password": "p" * 100_000})
    assert answer.status_code == 413 and login_app.seen == []


def test_failures_and_lock_outs_are_logged_with_account_and_address_never_the_password(login_app, clock, caplog):
    client = studio(login_app, clock)
    with caplog.at_level(logging.INFO, logger="studio.sign_in"):
        for _ in range(6):
            sign_in(client, "alice", WRONG, address="203.0.113.9")
        sign_in(client, "alice", PASSWORDS["alice"], address="203.0.113.9")
    records = [r for r in caplog.records if r.name == "studio.sign_in"]
    failures = [r for r in records if "failed sign-in" in r.getMessage()]
    lock_outs = [r for r in records if "locked out for" in r.getMessage()]
    assert len(failures) == 5 and len(lock_outs) == 1
    assert all("alice" in r.getMessage() and "203.0.113.9" in r.getMessage() for r in failures + lock_outs)
    assert all(r.levelno >= logging.WARNING for r in failures + lock_outs)
    text = "\n".join(r.getMessage() for r in records)
    assert WRONG not in text and PASSWORDS["alice"] not in text


def test_a_name_with_line_breaks_cannot_forge_log_lines(login_app, clock, caplog):
    client = studio(login_app, clock)
    with caplog.at_level(logging.INFO, logger="studio.sign_in"):
        sign_in(client, "mallory\nsign-in succeeded for 'alice'", WRONG)
    assert all("\n" not in r.getMessage() for r in caplog.records if r.name == "studio.sign_in")


def test_memory_stays_bounded_and_old_entries_are_forgotten(clock):
    ledger = SignInLedger(clock=clock, max_entries=100)
    for number in range(1000):
        ticket = ledger.begin(f"user{number}", f"10.0.{number // 250}.{number % 250}")
        ledger.finish(ticket, failed=True)
        assert ledger.size() <= 100
    clock.advance(15 * 60 + 15 * 60 + 1)  # past the window and the longest lock
    ticket = ledger.begin("alice", "10.9.9.9")
    ledger.finish(ticket, failed=False)
    assert ledger.size() <= 2


def test_concurrent_attempts_cannot_get_past_the_limit(clock):
    """Many wrong passwords sent at once: only as many reach the login as the limit allows."""
    ledger = SignInLedger(clock=clock)
    admitted: list[object] = []
    start = threading.Barrier(40)

    def attempt() -> None:
        start.wait()
        ticket = ledger.begin("alice", "203.0.113.9")
        if not isinstance(ticket, SignInLedger.Refusal):
            admitted.append(ticket)

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 5
    for ticket in admitted:
        ledger.finish(ticket, failed=True)
    refusal = ledger.begin("alice", "203.0.113.9")
    assert isinstance(refusal, SignInLedger.Refusal) and refusal.retry_after_s == 30


def test_an_attempt_that_ends_without_an_answer_frees_its_place(clock):
    ledger = SignInLedger(clock=clock)
    for _ in range(10):
        ledger.finish(ledger.begin("alice", "203.0.113.9"), failed=None)  # e.g. the client went away
    assert not isinstance(ledger.begin("alice", "203.0.113.9"), SignInLedger.Refusal)
