"""The crowd's guards on their own: bodies bounded by route, calls in flight counted per visitor, sessions bound to
their makers (the studio's own run in tests/integration/test_crowd_calls.py)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from studio.ui.body_limit import MAX_CALL_BODY_BYTES, MAX_TEXT_BYTES, BodyLimit, long_text
from studio.ui.call_limit import CallLedger
from studio.ui.session_binding import SessionBook

UPLOAD_CAP = 1 << 20


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"read": len(await request.body())})


def guarded() -> TestClient:
    routes = [Route(path, echo, methods=["POST"]) for path in ("/gradio_api/queue/join", "/gradio_api/upload", "/x")]
    return TestClient(BodyLimit(Starlette(routes=routes), max_upload_bytes=UPLOAD_CAP))


def test_a_long_text_field_is_found_and_named_by_its_place():
    assert long_text({"data": ["short", 3, None, ["x" * 100]]}) is None
    path, size = long_text({"data": ["short", {"k": "é" * (MAX_TEXT_BYTES // 2 + 1)}]})
    assert path == ["data", 1, "k"] and size > MAX_TEXT_BYTES


def test_bodies_are_bounded_by_their_route():
    client = guarded()
    assert client.post("/gradio_api/queue/join", json={"data": ["a" * 1000]}).json() == {"read": 1013}
    refused = client.post("/gradio_api/queue/join", json={"data": ["a" * (MAX_TEXT_BYTES + 1)]})
    assert refused.status_code == 413 and "64 KB" in refused.json()["detail"]
    assert client.post("/x", content=b"a" * (MAX_CALL_BODY_BYTES + 1)).status_code == 413
    # Sent in chunks with no length said: counted as it comes.
    chunks = (b"a" * 4096 for _ in range(MAX_CALL_BODY_BYTES // 4096 + 2))
    assert client.post("/x", content=chunks).status_code == 413
    chunks = (b"a" * 4096 for _ in range(MAX_CALL_BODY_BYTES // 4096 + 2))
    assert client.post("/gradio_api/queue/join", content=chunks).status_code == 413
    # The upload route takes up to the upload limit.
    assert client.post("/gradio_api/upload", content=b"a" * UPLOAD_CAP).json() == {"read": UPLOAD_CAP}
    too_big = client.post("/gradio_api/upload", content=b"a" * (2 * UPLOAD_CAP))
    assert too_big.status_code == 413 and "upload limit" in too_big.json()["detail"]


def test_calls_in_flight_are_counted_per_visitor_until_their_events_leave_the_queue():
    ledger, queued = CallLedger(), set()

    def alive(event: str) -> bool:
        return event in queued

    for n in range(3):
        assert ledger.try_take("bob", 3, alive)
        queued.add(f"e{n}")
        ledger.release("bob", f"e{n}")
    assert not ledger.try_take("bob", 3, alive)
    assert ledger.try_take("carol", 3, alive)  # another visitor's place is their own
    queued.discard("e0")  # one of bob's events is done
    assert ledger.try_take("bob", 3, alive)
    ledger.release("bob")  # answered without joining the queue: nothing stays counted
    assert ledger.in_flight("bob", alive) == 2


def test_a_session_is_its_makers_and_the_book_stays_bounded():
    book = SessionBook(max_sessions=3)
    assert book.allows("s1", "bob") and book.bind("s1", "bob")
    assert not book.bind("s1", "carol") and not book.allows("s1", "carol") and book.allows("s1", "bob")
    assert book.allows(None, "carol")
    for n in range(2, 6):
        book.bind(f"s{n}", "carol")
    assert book.owner("s1") is None and book.owner("s5") == "carol"
