"""A crowd on one studio, through plain HTTP as a hostile program would send it: no visitor holds what others need.

- Waits are short long-polls, and each visitor has a small cap of calls in flight: while bob tries to hold 45
  `/wait_run` calls, carol's light call answers within 2 s, and bob's calls beyond the cap are refused at once.
  A guest without an account can do no more. A visitor's own page, in several tabs at once, stays under the cap.
- A body too large for any call is refused before it is read: 100 MB in the prompts field in under a second,
  without the studio growing; a 65 KB prompt with the limit's own words; a normal run still works.
- A page session belongs to the visitor who made it: carol, with bob's session hash or event id, gets nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import psutil
import pytest

from studio.ui.history_tab import ANY, MINE
from tests.browser.conftest import RunningStudio, start_studio, stop_studio
from tests.waiting import log_tail, wait_for

ACCOUNTS = {"alice": "pw1", "bob": "pw2", "carol": "pw3"}
CAP = 8  # visitor_max_calls_in_flight's default
WAITS = 45
LIGHT_CALL_S = 2.0
LIGHT_CALL_TRIES = 3
LONG_POLL_S = 30.0  # /wait_run answers within about this, whatever timeout_s asks
RUN_TIMEOUT_S = 240.0
SMALL = {"tier": "256p", "aspect": "1:1", "frames": 9, "steps": 4, "seed": "1"}
# Stays unfinished for minutes (one request at a time, each of 200 steps on 81 frames of 480p, twelve of them), far
# past one long-poll on a machine several times quicker than this one; cancelled at the end.
HOLD = {"tier": "480p", "aspect": "1:1", "frames": 81, "steps": 200, "seed": "1", "copies": 12}
SUBMIT_FIELDS = {  # /submit_run's parameters in order, with their defaults
    "prompts": "",
    "tier": "256p",
    "aspect": "16:9",
    "frames": None,
    "fps": None,
    "steps": None,
    "guidance": None,
    "seed": "",
    "seed_policy": "fixed",
    "copies": 1,
    "concurrency": 1,
    "guardrails": True,
    "negative_prompt": "",
    "image_url": "",
}
# /history's parameters in order (show, search, state, tier, bench): the caller's own runs, unfiltered.
HISTORY_MINE = [MINE, "", ANY, ANY, False]


@dataclass
class Studio:
    running: RunningStudio
    url: str


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[Studio]:
    folder = tmp_path_factory.mktemp("crowd")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "alice")
    yield Studio(running, running.url)
    stop_studio(running)


@pytest.fixture(scope="module")
def guest_studio(tmp_path_factory) -> Iterator[Studio]:
    folder = tmp_path_factory.mktemp("crowd-guests")
    running = start_studio(folder / "outputs", folder / "studio.log", "--allow-anonymous")
    yield Studio(running, running.url)
    stop_studio(running)


def visitor(studio: Studio, user: str | None, address: str = "127.0.0.1") -> httpx.Client:
    """An HTTP client with a visitor's cookies: signed in where `user` is given, else a guest's browser; its
    requests come from `address` (any 127.x.y.z reaches the studio on loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    client = httpx.Client(base_url=studio.url, timeout=httpx.Timeout(60.0), transport=transport)
    if user is not None:
        answer = client.post("/login", data={"username": user, "password": ACCOUNTS[user]})
        assert answer.status_code == 200, answer.text
    assert client.get("/gradio_api/info").status_code == 200  # the studio's browser cookie, for guests
    return client


def submit_form(prompts: str, **fields: object) -> list[object]:
    values = {**SUBMIT_FIELDS, "prompts": prompts, **fields}
    return list(values.values())


def join(client: httpx.Client, api: str, data: list[object]) -> httpx.Response:
    return client.post(f"/gradio_api/call/{api}", json={"data": data})


def result(client: httpx.Client, api: str, event_id: str, timeout_s: float = 60.0) -> tuple[str, object]:
    """The event's outcome: ("complete", its data) or ("error", the message)."""
    with client.stream("GET", f"/gradio_api/call/{api}/{event_id}", timeout=timeout_s) as stream:
        kind = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind in ("complete", "error"):
                return kind, json.loads(line.removeprefix("data: "))
    raise AssertionError(f"the stream of {api} {event_id} ended without an outcome")


def call(client: httpx.Client, api: str, data: list[object], timeout_s: float = 60.0) -> object:
    joined = join(client, api, data)
    assert joined.status_code == 200, joined.text
    kind, value = result(client, api, joined.json()["event_id"], timeout_s)
    assert kind == "complete", value
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def timed(function, *args, **kwargs) -> tuple[float, object]:
    began = time.monotonic()
    value = function(*args, **kwargs)
    return time.monotonic() - began, value


def light_call_s(client: httpx.Client) -> float:
    """How long the caller's History takes to answer (infinite: not within 10 s)."""
    try:
        return timed(call, client, "history", HISTORY_MINE, 10.0)[0]
    except httpx.TimeoutException:
        return float("inf")


def held_waits(owner: httpx.Client, run_id: str, count: int) -> list[httpx.Response]:
    """`count` waits of one visitor sent at once, each asking for an hour."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda _: join(owner, "wait_run", [run_id, 3600]), range(count)))


def try_to_freeze(
    studio: Studio, owner: httpx.Client, others: list[httpx.Client], marker: str, long_poll: bool = True
) -> None:
    """`owner` tries to hold 45 waits on an unfinished run of theirs: the cap lets only a few in and refuses the
    rest with its reason, the others' light calls answer in time, and (`long_poll`) each wait answers within a
    long-poll, after which the owner's calls are taken again."""
    run = call(owner, "submit_run", submit_form(f"a slow circle {marker}", **HOLD))
    assert isinstance(run, dict) and not run["finished"], run
    began = time.monotonic()
    answers = held_waits(owner, run["run_id"], WAITS)
    for other in others:
        # The quickest of a few calls, all made while the waits are held: a frozen studio makes every one of them slow
        # (26 s before the cap), a machine busy with other work only some.
        quickest = min(light_call_s(other) for _ in range(LIGHT_CALL_TRIES))
        assert quickest < LIGHT_CALL_S, f"a light call took {quickest:.1f} s while one visitor held waits"
    accepted = [answer for answer in answers if answer.status_code == 200]
    refused = [answer for answer in answers if answer.status_code == 429]
    assert len(accepted) + len(refused) == WAITS, [answer.status_code for answer in answers]
    assert 1 <= len(accepted) <= CAP, len(accepted)
    assert "calls in flight" in refused[0].json()["detail"], refused[0].text
    # Beyond the cap, the owner's other calls are refused too, at once.
    elapsed, extra = timed(join, owner, "run_status", [run["run_id"]])
    assert extra.status_code == 429 and elapsed < LIGHT_CALL_S, (extra.status_code, elapsed)
    if not long_poll:
        return
    # Each held wait answers within a long-poll, unfinished: the caller asks again.
    kind, record = result(owner, "wait_run", accepted[0].json()["event_id"], LONG_POLL_S + 15)
    assert kind == "complete" and record[0]["finished"] is False, record
    assert time.monotonic() - began < LONG_POLL_S + 10
    # Once they have answered, the owner's calls are taken again.
    wait_for(
        lambda: join(owner, "run_status", [run["run_id"]]).status_code == 200,
        "the owner's calls to be taken once their waits answered",
        LONG_POLL_S,
        poll_s=0.5,
    )
    call(owner, "cancel_all", ["mine"])


def test_one_visitor_holding_waits_cannot_stall_the_others(studio):
    bob, carol, alice = visitor(studio, "bob"), visitor(studio, "carol"), visitor(studio, "alice")
    try_to_freeze(studio, bob, [carol, alice], "bob-holds-4e1c")


def test_a_guest_holding_waits_cannot_stall_the_others(guest_studio):
    """Guests of one address share a cap (a dropped cookie makes a new guest of the same party); a guest from
    another address is not held up."""
    holder, other = visitor(guest_studio, None), visitor(guest_studio, None, address="127.0.0.2")
    try_to_freeze(guest_studio, holder, [other], "guest-holds-77a0", long_poll=False)
    new_cookie = visitor(guest_studio, None)
    assert join(new_cookie, "history", HISTORY_MINE).status_code == 429


def page_events(client: httpx.Client) -> list[tuple[int, int]]:
    """The page's own events that fire without a click, each (fn index, inputs): page loads and timer ticks."""
    config = client.get("/config").json()
    return [
        (dependency["id"], len(dependency["inputs"]))
        for dependency in config["dependencies"]
        if any(target[1] in ("load", "tick") for target in dependency["targets"])
    ]


def test_a_visitors_own_tabs_open_at_once_stay_within_the_cap(studio):
    """Four tabs of carol's page opened at once: every load and timer tick of each is taken, none refused."""
    carol = visitor(studio, "carol")
    events = page_events(carol)
    assert len(events) >= 3
    joins = [
        {"data": [None] * inputs, "fn_index": fn_index, "session_hash": f"carol-tab-{tab}-{fn_index}", "trigger_id": 0}
        for tab in range(4)
        for fn_index, inputs in events
    ]
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda body: carol.post("/gradio_api/queue/join", json=body), joins))
    assert [answer.status_code for answer in answers] == [200] * len(joins), [a.text for a in answers if a.is_error]


def raw_post(
    url: str, path: str, headers: dict[str, str], body: bytes | None, chunked: bytes = b""
) -> tuple[float, int, str]:
    """POST on a bare socket, the body sent from another thread while the answer is read: (seconds to the
    answer's status line, status, answer text). A server that answers early is not made to read the rest."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = socket.create_connection((host, int(port)), timeout=30)

    def send_body() -> None:
        try:
            if body is not None:
                view = memoryview(body)
                for start in range(0, len(view), 1 << 20):
                    sock.sendall(view[start : start + (1 << 20)])
            else:
                for _ in range(64):
                    sock.sendall(f"{len(chunked):x}\r\n".encode() + chunked + b"\r\n")
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the studio answered and closed: the rest is not read, as meant

    began = time.monotonic()
    sock.sendall((head + "\r\n").encode())
    sender = threading.Thread(target=send_body, daemon=True)
    sender.start()
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
        took = time.monotonic() - began
        sock.settimeout(2)
        try:
            while piece := sock.recv(65536):
                received += piece
                if len(received) > 1 << 16:
                    break
        except OSError:
            pass
    finally:
        sock.close()
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/") else 0
    return took, status, received.decode("latin-1")


def test_a_huge_prompts_field_is_refused_at_once_without_growing_the_studio(studio):
    bob = visitor(studio, "bob")
    cookies = "; ".join(f"{name}={value}" for name, value in bob.cookies.items())
    process = psutil.Process(studio.running.process.pid)
    rss_before = process.memory_info().rss
    prompt = b"a" * (100 * 2**20)
    body = b'{"data": ["' + prompt + b'", "256p"]}'
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Cookie": cookies}
    took, status, text = raw_post(studio.url, "/gradio_api/call/submit_run", headers, body)
    assert status == 413 and took < 1.0, (status, took, text[:300])
    assert "64 KB" in text
    # The same sent in chunks, with no length said before.
    chunked_headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Cookie": cookies}
    took, status, text = raw_post(studio.url, "/gradio_api/queue/join", chunked_headers, None, b"a" * 65536)
    assert status == 413 and took < 1.0, (status, took, text[:300])
    # An upload body over the page's upload limit, refused before it is read.
    upload_headers = {"Content-Type": "multipart/form-data; boundary=x", "Content-Length": str(100 * 2**20)}
    took, status, text = raw_post(studio.url, "/gradio_api/upload", {**upload_headers, "Cookie": cookies}, prompt)
    assert status == 413 and took < 1.0, (status, took, text[:300])
    grown = process.memory_info().rss - rss_before
    assert grown < 10 * 2**20, f"the studio grew by {grown / 2**20:.0f} MB"


def test_a_prompt_over_64_kb_is_refused_with_the_limit_and_a_normal_run_works(studio):
    bob = visitor(studio, "bob")
    refused = join(bob, "submit_run", submit_form("a" * (65 * 1024), **SMALL))
    assert refused.status_code == 413, refused.text[:300]
    detail = refused.json()["detail"]
    assert "64 KB" in detail and "prompt" in detail, detail
    run = call(bob, "submit_run", submit_form("a small green square", **SMALL))

    def finished() -> dict | None:
        record = call(bob, "wait_run", [run["run_id"], 20], LONG_POLL_S + 15)
        return record if record["finished"] else None

    done = wait_for(finished, "the small run to finish", RUN_TIMEOUT_S, detail=lambda: log_tail(studio.running.log))
    assert done["states"] == {"done": 1}, done


def read_stream(
    client: httpx.Client, path: str, params: dict[str, str] | None = None, seconds: float = 3.0
) -> tuple[int, str]:
    """A stream's status and what it sent within `seconds` (it may never end by itself)."""
    text = ""
    try:
        with client.stream("GET", path, params=params, timeout=httpx.Timeout(seconds, connect=5)) as stream:
            status = stream.status_code
            deadline = time.monotonic() + seconds
            for piece in stream.iter_text():
                text += piece
                if "close_stream" in text or time.monotonic() > deadline:
                    break
    except httpx.ReadTimeout:
        pass
    return status, text


def test_a_page_session_and_its_stream_belong_to_the_visitor_who_made_it(studio):
    bob, carol = visitor(studio, "bob"), visitor(studio, "carol")
    marker = "bob-private-93d2"
    call(bob, "submit_run", submit_form(f"a blue circle {marker}", **SMALL))
    config = bob.get("/config").json()
    history_fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "history")
    session = "bobsession93d2"
    joined = bob.post(
        "/gradio_api/queue/join",
        json={"data": HISTORY_MINE, "fn_index": history_fn, "session_hash": session, "trigger_id": 0},
    )
    assert joined.status_code == 200, joined.text
    # carol, with bob's session hash: neither its stream nor a call in it.
    status, text = read_stream(carol, "/gradio_api/queue/data", {"session_hash": session})
    assert marker not in text and status in (403, 404), (status, text[:300])
    stolen = carol.post(
        "/gradio_api/queue/join",
        json={"data": HISTORY_MINE, "fn_index": history_fn, "session_hash": session, "trigger_id": 0},
    )
    assert stolen.status_code in (403, 404), stolen.text
    # A call made without a session hash is read by its event id: bob's, not carol's.
    event_id = join(bob, "history", HISTORY_MINE).json()["event_id"]
    status, text = read_stream(carol, f"/gradio_api/call/history/{event_id}")
    assert marker not in text and status in (403, 404), (status, text[:300])
    # bob reads his own.
    status, text = read_stream(bob, "/gradio_api/queue/data", {"session_hash": session}, seconds=10.0)
    assert status == 200 and marker in text, (status, text[:300])
    kind, value = result(bob, "history", event_id)
    assert kind == "complete" and marker in json.dumps(value)
