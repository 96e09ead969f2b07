"""Uploads are capped per visitor per hour, before they are stored, and an upload no run took is deleted soon.

A real guest studio (--allow-anonymous) is probed from its upload route as a hostile guest would: 30 files an hour
and then a refusal, whatever cookie it sends or drops; no more bytes an hour than the cap, the refused upload never
kept; many files in one request counted as many. Operators, accounts and the caps changed live, and the sweep of
unused uploads (its clock moved, not waited for), on Gradio's own upload route in this process.

Each case comes from its own loopback address (127.0.0.x), so that the counts of one do not reach another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import httpx
import pytest
from starlette.middleware import Middleware

from studio.backend.face import Visitor
from studio.backend.servers.supervisor import free_port
from studio.ui.file_guard import BROWSER_COOKIE, VisitorBook
from studio.ui.upload_limit import UNUSED_UPLOAD_S, UploadCaps, UploadLedger, UploadLimit
from tests.browser.conftest import RunningStudio, start_studio, stop_studio

MB = 2**20


def upload(url: str, source: str, files: list[bytes], cookie: str | None = None) -> httpx.Response:
    """`files` sent in one request to Gradio's upload route, from loopback address `source`."""
    transport = httpx.HTTPTransport(local_address=source)
    cookies = {BROWSER_COOKIE: cookie} if cookie else None
    with httpx.Client(transport=transport, cookies=cookies, timeout=60) as client:
        parts = [("files", (f"image{i}.png", data, "image/png")) for i, data in enumerate(files)]
        return client.post(f"{url}/gradio_api/upload", files=parts)


def unique(size: int, tag: str) -> bytes:
    """`size` bytes no other upload of this module sends."""
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def stored_digests(folder: Path) -> set[str]:
    """What the upload folder holds, by content."""
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def refusal(response: httpx.Response, status: int, limit: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["limit"] == limit and limit in body["error"], body
    return body


# --- a real guest studio ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[tuple[RunningStudio, Path]]:
    folder = tmp_path_factory.mktemp("uploads")
    gradio_dir = folder / "gradio"
    running = start_studio(
        folder / "outputs",
        folder / "studio.log",
        "--allow-anonymous",
        "--visitor-max-upload-mb-per-hour",
        "2",
        env={"GRADIO_TEMP_DIR": str(gradio_dir)},
    )
    yield running, gradio_dir
    stop_studio(running)


def test_the_31st_upload_of_an_hour_is_refused_whatever_cookie_it_sends(studio) -> None:
    running, _ = studio
    source = "127.0.0.2"
    for i in range(30):
        answer = upload(running.url, source, [unique(100, f"count-{i}")], cookie=None if i % 2 else f"cookie-{i}")
        assert answer.status_code == 200, (i, answer.text)
    body = refusal(upload(running.url, source, [unique(100, "count-30")]), 429, "visitor_max_uploads_per_hour")
    assert body["retry_after_s"] > 0
    # A new (or dropped) cookie is no new visitor: the guest's address carries the count.
    refusal(upload(running.url, source, [unique(100, "count-31")], cookie="fresh"), 429, "visitor_max_uploads_per_hour")
    # Another address has its own.
    assert upload(running.url, "127.0.0.3", [unique(100, "count-other")]).status_code == 200


def test_bytes_over_the_hour_s_cap_are_refused_and_never_stored(studio) -> None:
    running, gradio_dir = studio
    source = "127.0.0.4"
    first = unique(MB + MB // 2, "bytes-first")
    assert upload(running.url, source, [first]).status_code == 200
    assert hashlib.sha256(first).hexdigest() in stored_digests(gradio_dir)
    before = stored_digests(gradio_dir)
    second = unique(MB, "bytes-second")
    body = refusal(upload(running.url, source, [second]), 413, "visitor_max_upload_mb_per_hour")
    assert "2 MB an hour" in body["error"]
    # One upload over the whole cap, from an address with nothing sent yet.
    refusal(upload(running.url, "127.0.0.5", [unique(3 * MB, "bytes-whole")]), 413, "visitor_max_upload_mb_per_hour")
    assert stored_digests(gradio_dir) == before


def test_many_files_in_one_request_count_as_many(studio) -> None:
    running, gradio_dir = studio
    source = "127.0.0.6"
    before = stored_digests(gradio_dir)
    many = [unique(50, f"many-{i}") for i in range(31)]
    refusal(upload(running.url, source, many), 429, "visitor_max_uploads_per_hour")
    assert stored_digests(gradio_dir) == before  # none of the 31 kept
    answer = upload(running.url, source, many[:30])
    assert answer.status_code == 200 and len(answer.json()) == 30
    refusal(upload(running.url, source, [unique(50, "many-after")]), 429, "visitor_max_uploads_per_hour")


# --- Gradio's own upload route in this process, with a clock the test moves -------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("gradio-uploads")
    monkey = pytest.MonkeyPatch()
    monkey.setenv("GRADIO_TEMP_DIR", str(folder))
    clock, caps, book = Clock(), {"uploads": 3, "mb": 200}, VisitorBook()
    ledger = UploadLedger(lambda: UploadCaps(caps["uploads"], caps["mb"]), clock=clock)
    with gr.Blocks() as demo:
        gr.Image(type="filepath")
    port = free_port()
    middleware = Middleware(UploadLimit, book=book, ledger=ledger, upload_folder=folder)
    demo.launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        app_kwargs={"middleware": [middleware], "lifespan": ledger.sweeping},
    )
    try:
        yield {"url": f"http://127.0.0.1:{port}", "clock": clock, "caps": caps, "book": book, "ledger": ledger}
    finally:
        demo.close()
        monkey.undo()


def test_an_upload_no_run_took_is_deleted_by_the_sweep(page) -> None:
    clock, ledger = page["clock"], page["ledger"]
    (early,) = upload(page["url"], "127.0.1.1", [unique(10, "sweep-early")]).json()
    clock.now += UNUSED_UPLOAD_S / 2
    (late,) = upload(page["url"], "127.0.1.1", [unique(10, "sweep-late")]).json()
    assert Path(early).is_file() and Path(late).is_file()
    assert ledger.sweep() == []  # both just uploaded: a page can still use them
    clock.now += UNUSED_UPLOAD_S / 2 + 1
    assert ledger.sweep() == [Path(early).resolve()]
    assert not Path(early).exists() and not Path(early).parent.exists() and Path(late).is_file()
    clock.now += UNUSED_UPLOAD_S
    ledger.sweep()
    assert not Path(late).exists()


def test_operators_are_not_capped_and_accounts_count_apart_from_their_address(page) -> None:
    url, book = page["url"], page["book"]
    book.note("alice-browser", Visitor(id="user:alice", name="alice", operator=True))
    book.note("bob-browser", Visitor(id="user:bob", name="bob"))
    source = "127.0.1.2"
    for i in range(5):
        assert upload(url, source, [unique(10, f"alice-{i}")], cookie="alice-browser").status_code == 200
    for i in range(3):
        assert upload(url, source, [unique(10, f"bob-{i}")], cookie="bob-browser").status_code == 200
    refusal(upload(url, source, [unique(10, "bob-4")], cookie="bob-browser"), 429, "visitor_max_uploads_per_hour")
    # bob's uploads are his own: a guest at the same address still has all of its count.
    assert upload(url, source, [unique(10, "guest-0")]).status_code == 200


def test_a_cap_changed_while_serving_binds_at_once_and_the_hour_frees_it(page) -> None:
    url, caps, clock = page["url"], page["caps"], page["clock"]
    source = "127.0.1.3"
    for i in range(3):
        assert upload(url, source, [unique(10, f"live-{i}")]).status_code == 200
    refused = upload(url, source, [unique(10, "live-3")])
    refusal(refused, 429, "visitor_max_uploads_per_hour")
    assert int(refused.headers["retry-after"]) > 0
    caps["uploads"] = 4
    try:
        assert upload(url, source, [unique(10, "live-4")]).status_code == 200
        refusal(upload(url, source, [unique(10, "live-5")]), 429, "visitor_max_uploads_per_hour")
        clock.now += 3601
        assert upload(url, source, [unique(10, "live-6")]).status_code == 200
    finally:
        caps["uploads"] = 3


def test_an_upload_without_its_size_is_refused(page) -> None:
    def body() -> Iterator[bytes]:
        yield b"--x\r\nContent-Disposition: form-data; name=files; filename=a.png\r\n\r\nabc\r\n--x--\r\n"

    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.1.4")) as client:
        answer = client.post(
            f"{page['url']}/gradio_api/upload",
            content=body(),
            headers={"Content-Type": "multipart/form-data; boundary=x"},
        )
    assert answer.status_code == 411 and json.loads(answer.text)["limit"] == "content-length"
