"""A real studio with accounts, signed in and out as a hostile site and a hostile guesser would try it:
- the address a sign-in limit counts is the peer's own: a forged X-Forwarded-For names no new address;
- wrong passwords lock an account for the address that guessed, and its owner still signs in from hers;
- a file goes to a browser only while it is signed in as the file's owner (not after sign-out, nor to another
  account signed in on the same browser);
- signing in or out from another site is refused, and GET /logout signs no one out.
Requests come from several loopback addresses (127.0.0.x), as from several machines."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import httpx
import pytest
from gradio_client import Client

from tests.browser.conftest import RunningStudio, start_studio, stop_studio
from tests.waiting import wait_for

ACCOUNTS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "dave": "dave-pw"}
WRONG = "not-the-password-77e1"
RUN_TIMEOUT_S = 240.0
QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("sign-in")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "alice")
    yield running
    stop_studio(running)


def web(studio: RunningStudio, source: str = "127.0.0.1", **options) -> httpx.Client:
    """An HTTP client whose requests come from `source` (any 127.0.0.x reaches the studio on 127.0.0.1)."""
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=studio.url, transport=transport, timeout=30, follow_redirects=False, **options)


def sign_in(http: httpx.Client, user: str, password: str, **headers: str) -> httpx.Response:
    return http.post("/login", data={"username": user, "password": password}, headers=headers)


def signed_in(http: httpx.Client) -> bool:
    return http.get("/gradio_api/login_check").status_code == 200


def test_a_forged_forwarded_header_names_no_new_address(studio):
    with web(studio, "127.0.0.3") as http:
        answers = [
            sign_in(http, f"nobody{n}", WRONG, **{"X-Forwarded-For": f"198.51.100.{n}"}).status_code for n in range(30)
        ]
    assert answers == [400] * 20 + [429] * 10


def test_a_guesser_locks_the_account_for_its_own_address_only(studio):
    with web(studio, "127.0.0.2") as guesser, web(studio, "127.0.0.4") as dave:
        answers = [sign_in(guesser, "dave", WRONG).status_code for _ in range(6)]
        assert answers == [400] * 5 + [429]
        assert sign_in(guesser, "dave", ACCOUNTS["dave"]).status_code == 429
        right = sign_in(dave, "dave", ACCOUNTS["dave"])
        assert right.status_code == 200 and signed_in(dave)


def test_sign_in_and_sign_out_from_another_site_are_refused(studio):
    evil = {"Origin": "https://evil.example"}
    with web(studio) as http:
        refused = sign_in(http, "carol", ACCOUNTS["carol"], **evil)
        assert refused.status_code == 403 and not signed_in(http)
        assert not [name for name in http.cookies if name.startswith("access-token")]
        own = {"Origin": studio.url}
        assert sign_in(http, "carol", ACCOUNTS["carol"], **own).status_code == 200 and signed_in(http)
        # A link, an image, another site's form: none signs carol out.
        page = http.get("/logout")
        assert page.status_code == 200 and 'method="post"' in page.text and signed_in(http)
        assert http.post("/logout", headers=evil).status_code == 403 and signed_in(http)
        assert http.post("/logout", headers={"Referer": "https://evil.example/page"}).status_code == 403
        assert signed_in(http)
        # The studio's own page's button does.
        assert http.post("/logout", headers={"Origin": studio.url}).status_code == 302
        http.cookies.clear()
        # A program signs in without an Origin, as gradio_client does.
        assert sign_in(http, "carol", ACCOUNTS["carol"]).status_code == 200 and signed_in(http)
    Client(studio.url, auth=("carol", ACCOUNTS["carol"]), verbose=False).predict(api_name="/history")


def test_files_go_to_a_browser_only_while_it_is_signed_in_as_their_owner(studio):
    bob = Client(studio.url, auth=("bob", ACCOUNTS["bob"]), verbose=False)
    marker = "bob-file-3c9e"
    assert bob.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate").startswith("queued")

    def video() -> tuple[str, str] | None:
        with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
            query = "SELECT video_path, sidecar_path FROM requests WHERE prompt LIKE ? AND state = 'done'"
            return db.execute(query, (f"%{marker}%",)).fetchone()

    paths = wait_for(video, "bob's video", RUN_TIMEOUT_S)
    root = studio.outputs.resolve()
    urls = [f"/studio/files/{(studio.outputs / p).resolve().relative_to(root).as_posix()}" for p in paths]

    with web(studio, cookies=bob.cookies) as browser:
        assert [browser.get(url).status_code for url in urls] == [200, 200]
        assert browser.post("/logout", headers={"Origin": studio.url}).status_code == 302
        assert [browser.get(url).status_code for url in urls] == [403, 403]  # signed out: nothing
        assert not signed_in(browser)
        # carol signs in on the same browser (its studio cookie kept): bob's files are not hers, before her first
        # event and after it.
        assert sign_in(browser, "carol", ACCOUNTS["carol"]).status_code == 200
        assert [browser.get(url).status_code for url in urls] == [403, 403]
    carol = Client(studio.url, auth=("carol", ACCOUNTS["carol"]), verbose=False)
    carol.cookies.update({name: value for name, value in bob.cookies.items() if name.startswith("omni-studio")})
    carol.predict(api_name="/history")
    with web(studio, cookies=carol.cookies) as browser:
        assert [browser.get(url).status_code for url in urls] == [403, 403]
    # bob, signed in again, has them.
    again = Client(studio.url, auth=("bob", ACCOUNTS["bob"]), verbose=False)
    again.predict(api_name="/history")
    with web(studio, cookies=again.cookies) as browser:
        assert [browser.get(url).status_code for url in urls] == [200, 200]
