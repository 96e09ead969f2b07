"""Every route the studio's app serves, Gradio's included, asked for another visitor's files, the history database,
its journal and the logs: with a visitor's session and with none, under accounts and under guests.

The routes are read from the app's own route table (and the studio's file route beside them), so a route that a
later Gradio or the studio adds is walked too. Each file asked for holds a marker of its own; no answer may carry
one. The owner fetching her own video through the studio's file route shows that a leak would be seen.

The studio is served in this process, as `omni-studio ui` serves it (launch.serve_page), on a free loopback port;
its history is written through its own store, so no engine is needed: the guard is what is tested here.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from gradio_client import Client
from pydantic import SecretStr

from studio.backend.access import AccessPolicy
from studio.backend.controller import StudioController
from studio.backend.servers.supervisor import free_port
from studio.config import StudioSettings
from studio.ui.file_guard import FILES_ROUTE
from studio.ui.identity import PageAccess
from studio.ui.launch import serve_page

ALICE_RUN, ALICE_REQUEST = "run_20261201_120000_a1a1a1", "req_a1a1a1a1a1a1"
ALICE_ID = "user:alice"
PARAMETER = re.compile(r"\{[^}]+\}")
# Sign-out ends the caller's own session and serves no file: walked last, so the rest run signed in.
LAST = ("/logout",)
READ_AT_MOST = 1 << 20


@dataclass
class Planted:
    path: Path
    marker: bytes


@dataclass
class ServedStudio:
    url: str
    outputs: Path
    planted: dict[str, Planted]
    controller: StudioController
    demo: object


def plant(controller: StudioController) -> dict[str, Planted]:
    """Alice's run with a video, its poster, sidecar and export, and a log line: each file with a marker."""
    store, created = controller.store, time.time()
    store.add_run(ALICE_RUN, {"prompts": ["alice's secret prompt MARK-db"]}, created, visitor_id=ALICE_ID)
    store.add_request(ALICE_REQUEST, ALICE_RUN, 0, created, "alice's secret prompt MARK-db", {"seed": 1})
    video = store.video_path_for(ALICE_REQUEST, created)
    video.parent.mkdir(parents=True, exist_ok=True)
    files = {
        "video": (video, b"\x00\x00\x00\x18ftypisom MARK-video"),
        "poster": (video.with_suffix(".jpg"), b"\xff\xd8\xff MARK-poster"),
        "sidecar": (video.with_suffix(".json"), json.dumps({"prompt": "MARK-sidecar"}).encode()),
        "export": (store.root / "exports" / f"{ALICE_RUN}.json", b'{"MARK-export": 1}'),
        "log": (store.logs_dir / "embedded-server.log", b"engine ready MARK-log\n"),
    }
    planted = {}
    for name, (path, content) in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        planted[name] = Planted(path, re.search(rb"MARK-\w+", content).group(0))
    store.update_request(ALICE_REQUEST, state="done", video_path=video, sidecar_path=video.with_suffix(".json"))
    root = store.root
    for name in ("history.sqlite3", "history.sqlite3-wal"):
        planted[name] = Planted(root / name, b"MARK-db")
    assert b"MARK-db" in (root / "history.sqlite3-wal").read_bytes() + (root / "history.sqlite3").read_bytes()
    secrets_dir = root / ".secrets"
    for key in secrets_dir.glob("*") if secrets_dir.is_dir() else ():
        planted[f"secret {key.name}"] = Planted(key, key.read_bytes()[:16])
    return planted


def serve(tmp: Path, **access: object) -> ServedStudio:
    outputs = tmp / "outputs"
    settings = StudioSettings(_env_file=None, outputs_dir=outputs, host="127.0.0.1", port=free_port(), **access)
    controller = StudioController(settings)  # never started: no engine, the page and its routes only
    planted = plant(controller)
    page_access = PageAccess(AccessPolicy.from_settings(settings))
    demo = serve_page(controller, page_access)
    return ServedStudio(f"http://127.0.0.1:{settings.port}", outputs, planted, controller, demo)


@pytest.fixture(scope="module")
def with_accounts(tmp_path_factory) -> Iterator[ServedStudio]:
    accounts = [SecretStr("alice:alice-pw"), SecretStr("bob:bob-pw"), SecretStr("olga:olga-pw")]
    studio = serve(tmp_path_factory.mktemp("accounts"), auth=accounts, operators=["olga"])
    yield studio
    studio.demo.close()
    studio.controller.close()


@pytest.fixture(scope="module")
def with_guests(tmp_path_factory) -> Iterator[ServedStudio]:
    studio = serve(tmp_path_factory.mktemp("guests"), allow_anonymous=True)
    yield studio
    studio.demo.close()
    studio.controller.close()


def route_table(app) -> list[tuple[str, set[str]]]:
    """(path template, methods) of every route of the app, routers included at any depth."""
    found: list[tuple[str, set[str]]] = []

    def walk(routes, prefix: str) -> None:
        for route in routes:
            context = getattr(route, "include_context", None)
            if context is not None:
                walk(context.included_router.routes, prefix + context.prefix)
            elif hasattr(route, "routes"):
                walk(route.routes, prefix + getattr(route, "path", ""))
            elif hasattr(route, "path"):
                found.append((prefix + route.path, set(getattr(route, "methods", None) or {"GET"})))

    walk(app.routes, "")
    return found


def spellings(target: Path, outputs: Path) -> list[str]:
    """A file's path as a hostile caller writes it: absolute, relative to here, to the outputs folder, encoded."""
    absolute = str(target.resolve())
    relative = os.path.relpath(target.resolve(), Path.cwd())
    under = target.resolve().relative_to(outputs.resolve()).as_posix()
    return [
        absolute,
        quote(absolute, safe=""),
        quote(quote(absolute, safe=""), safe=""),
        relative,
        relative.replace("/", "%2f"),
        under,
        f"videos/../{under}",
        f"%2e%2e/{outputs.name}/{under}",
    ]


def requests_for(studio: ServedStudio) -> list[tuple[str, str, str]]:
    """(method, url, what) for each route, method and spelling of each planted file."""
    routes = [*route_table(studio.demo.app), (f"{FILES_ROUTE}{{path:path}}", {"GET", "HEAD"})]
    routes.sort(key=lambda route: route[0] in LAST)
    asked = []
    for template, methods in routes:
        for method in sorted(methods & {"GET", "HEAD", "POST"}):
            for name, planted in studio.planted.items():
                written = spellings(planted.path, studio.outputs)
                if not PARAMETER.search(template):  # a route without parameters: the file named in its query
                    query = "&".join(f"{key}={written[0]}" for key in ("path", "file", "url"))
                    asked.append((method, f"{studio.url}{template}?{query}", name))
                    continue
                for spelling in written:
                    asked.append((method, f"{studio.url}{PARAMETER.sub(lambda _, s=spelling: s, template)}", name))
    return asked


def leaks(studio: ServedStudio, cookies: httpx.Cookies | dict) -> list[str]:
    """The requests whose answer carries a planted file's marker."""
    found = []
    markers = [planted.marker for planted in studio.planted.values()]
    # Streams (the queue's events, heartbeats) answer slowly or never end: what came within a second is read.
    timeout = httpx.Timeout(10.0, read=1.0)
    with httpx.Client(cookies=cookies, timeout=timeout, follow_redirects=False) as http:
        for method, url, name in requests_for(studio):
            body = b""
            try:
                with http.stream(method, url) as response:
                    for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > READ_AT_MOST:
                            break
            except httpx.HTTPError:
                pass
            if any(marker in body for marker in markers):
                found.append(f"{method} {url} ({name})")
    return found


def signed_in(studio: ServedStudio, user: str | None) -> httpx.Cookies:
    """A visitor's cookies once the studio knows their browser (it has used the page's API)."""
    client = Client(studio.url, auth=(user, f"{user}-pw") if user else None, verbose=False)
    client.predict(api_name="/history")
    return client.cookies


def test_a_leak_would_be_seen_the_owner_gets_her_video_through_the_studios_route(with_accounts):
    cookies = signed_in(with_accounts, "alice")
    video = with_accounts.planted["video"]
    relative = video.path.resolve().relative_to(with_accounts.outputs.resolve()).as_posix()
    answer = httpx.get(f"{with_accounts.url}{FILES_ROUTE}{relative}", cookies=cookies, timeout=20)
    assert answer.status_code == 200 and video.marker in answer.content
    assert answer.headers["content-type"] == "video/mp4"
    # Her history database is hers no more than anyone's: no route serves it.
    db = httpx.get(f"{with_accounts.url}{FILES_ROUTE}history.sqlite3", cookies=cookies, timeout=20)
    assert db.status_code == 403 and b"MARK-db" not in db.content


def test_no_route_gives_a_signed_in_visitor_another_visitors_files_the_database_or_the_logs(with_accounts):
    assert leaks(with_accounts, signed_in(with_accounts, "bob")) == []


def test_no_route_gives_a_caller_without_a_session_anything_under_accounts(with_accounts):
    assert leaks(with_accounts, {}) == []


def test_no_route_gives_a_guest_or_a_caller_without_a_cookie_anything(with_guests):
    assert leaks(with_guests, signed_in(with_guests, None)) == []
    assert leaks(with_guests, {}) == []


def test_an_operator_gets_visitors_videos_but_never_the_database_or_the_logs(with_accounts):
    cookies = signed_in(with_accounts, "olga")
    base = f"{with_accounts.url}{FILES_ROUTE}"
    outputs = with_accounts.outputs.resolve()
    for name in ("video", "sidecar", "export"):
        relative = with_accounts.planted[name].path.resolve().relative_to(outputs).as_posix()
        assert httpx.get(base + relative, cookies=cookies, timeout=20).status_code == 200, name
    for name in ("history.sqlite3", "history.sqlite3-wal", "log"):
        relative = with_accounts.planted[name].path.resolve().relative_to(outputs).as_posix()
        assert httpx.get(base + relative, cookies=cookies, timeout=20).status_code == 403, name


def test_gradio_monitoring_is_off_for_everyone(with_accounts):
    """Gradio's monitoring counts and times every visitor's calls: no visitor, nor an operator, may read it."""
    for user in ("bob", "olga"):
        cookies = signed_in(with_accounts, user)
        for path in ("/monitoring", "/monitoring/summary"):
            answer = httpx.get(f"{with_accounts.url}{path}", cookies=cookies, timeout=20)
            assert answer.status_code == 403, (user, path, answer.text[:200])


def test_an_upload_over_the_pages_limit_is_refused_by_the_upload_route_and_not_stored(with_guests):
    from gradio.utils import get_upload_folder

    from studio.backend.runs.spec import MAX_UPLOAD_BYTES

    folder = Path(get_upload_folder())
    before = {path for path in folder.rglob("*") if path.is_file()} if folder.is_dir() else set()
    big = b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_UPLOAD_BYTES
    for cookies in ({}, signed_in(with_guests, None)):
        answer = httpx.post(
            f"{with_guests.url}/gradio_api/upload", files={"files": ("big.png", big, "image/png")}, cookies=cookies
        )
        assert answer.status_code == 413, answer.text[:200]
    after = {path for path in folder.rglob("*") if path.is_file()} if folder.is_dir() else set()
    assert not [path for path in after - before if path.stat().st_size >= MAX_UPLOAD_BYTES]
    small = httpx.post(f"{with_guests.url}/gradio_api/upload", files={"files": ("small.png", b"\x89PNG", "image/png")})
    assert small.status_code == 200
