"""Many people, one studio, through its public API (gradio_client) and its file URLs: each visitor sees and
cancels only their own work, the operator's endpoints refuse visitors and change nothing, and a video's URL
answers its owner and operators only. A real studio on its embedded engine, with three accounts."""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.browser.conftest import RunningStudio, start_studio, stop_studio
from tests.waiting import wait_for

ACCOUNTS = {"alice": "alice-pass", "bob": "bob-pass", "olga": "olga-pass"}
RUN_TIMEOUT_S = 240.0
QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("visitors")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "olga")
    yield running
    stop_studio(running)


def client(studio: RunningStudio, user: str) -> Client:
    return Client(studio.url, auth=(user, ACCOUNTS[user]), verbose=False)


def rows(studio: RunningStudio, query: str, *args) -> list[tuple]:
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        return db.execute(query, args).fetchall()


def run_of(studio: RunningStudio, marker: str) -> str:
    found = rows(studio, "SELECT DISTINCT run_id FROM requests WHERE prompt LIKE ?", f"%{marker}%")
    assert len(found) == 1
    return found[0][0]


def states(studio: RunningStudio, run_id: str) -> list[str]:
    return [state for (state,) in rows(studio, "SELECT state FROM requests WHERE run_id = ? ORDER BY position", run_id)]


def history_text(user_client: Client, show: str = "mine") -> str:
    return str(user_client.predict(show=show, api_name="/history"))


def test_each_visitor_sees_and_cancels_only_their_own_work(studio):
    alice, bob, olga = client(studio, "alice"), client(studio, "bob"), client(studio, "olga")
    marker = "alice-only-7d41"
    status = alice.predict(
        prompts=f"a red circle {marker}", copies=4, concurrency=1, **{**QUICK, "steps": 200}, api_name="/generate"
    )
    assert status.startswith("queued 4 requests")
    run_id = run_of(studio, marker)
    wait_for(lambda: set(states(studio, run_id)) - {"waiting"}, "alice's first request at the engine", RUN_TIMEOUT_S)

    assert marker not in history_text(bob) and run_id not in history_text(bob, show="everyone")
    assert bob.predict(api_name="/cancel_all") == "nothing in flight to cancel"
    (first_id,) = rows(studio, "SELECT id FROM requests WHERE run_id = ? AND position = 0", run_id)[0]
    assert bob.predict(request_id=first_id, api_name="/cancel").startswith("no request in flight")
    assert bob.predict(run_id=run_id, api_name="/rerun").startswith("**cannot re-run**")
    assert "cancelled" not in states(studio, run_id)

    # The operator sees everyone's work where they ask for it, and may cancel it.
    assert marker not in history_text(olga) and marker in history_text(olga, show="everyone")
    outcome = olga.predict(show="everyone", api_name="/cancel_all")
    assert outcome.startswith("cancelled")
    wait_for(lambda: all(s in ("cancelled", "done") for s in states(studio, run_id)), "the cancel", RUN_TIMEOUT_S)
    assert "cancelled" in states(studio, run_id)
    assert marker in history_text(alice)


def refused_to_a_visitor(call: Callable[[], object]) -> None:
    """The call is answered 403 with the reason: an operator endpoint, refused before Gradio reads its values."""
    with pytest.raises(httpx.HTTPStatusError) as refused:
        call()
    answer = refused.value.response
    assert answer.status_code == 403 and "only an operator of this studio can" in answer.text, answer.text


@pytest.mark.parametrize(
    ("endpoint", "values"),
    [
        ("/stop_server", ()),
        ("/start_server", ()),
        ("/restart_server", (None,)),
        ("/doctor", ()),
        ("/bench", ()),
        ("/apply_layout", (None,)),
    ],
)
def test_the_operators_endpoints_refuse_a_visitor_and_change_nothing(studio, endpoint, values):
    bob = client(studio, "bob")
    # Not in a visitor's API listing, so gradio_client maps no keywords for them: the values go by position.
    refused_to_a_visitor(lambda: bob.predict(*values, api_name=endpoint))
    # The engine kept serving: a visitor's request after the refusal is made.
    marker = f"after-refusal-{endpoint.strip('/')}"
    assert bob.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate").startswith("queued")
    run_id = run_of(studio, marker)
    wait_for(lambda: states(studio, run_id) == ["done"], "the request after the refusal", RUN_TIMEOUT_S)
    assert client(studio, "olga").predict(api_name="/start_server").startswith("already running")
    assert "only an operator" not in studio.log.read_text()  # a refusal is the caller's answer, not a log error


def test_a_video_url_answers_its_owner_and_operators_only(studio):
    alice, bob, olga = client(studio, "alice"), client(studio, "bob"), client(studio, "olga")
    marker = "alice-video-2c9e"
    alice.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate")
    run_id = run_of(studio, marker)
    wait_for(lambda: states(studio, run_id) == ["done"], "alice's video", RUN_TIMEOUT_S)
    (video,) = rows(studio, "SELECT video_path FROM requests WHERE run_id = ?", run_id)[0]
    video = Path(video).resolve()
    for user_client in (alice, bob, olga):  # each browser is known to the studio once it has used the page
        history_text(user_client)

    def fetch(path: Path, user_client: Client | None) -> httpx.Response:
        """The file through the studio's own file route, the only one that serves the outputs folder."""
        cookies = user_client.cookies if user_client else {}
        relative = path.resolve().relative_to(studio.outputs.resolve()).as_posix()
        return httpx.get(f"{studio.url}/studio/files/{relative}", cookies=cookies, timeout=30)

    assert fetch(video, alice).status_code == 200 and fetch(video, alice).content[4:8] == b"ftyp"
    assert fetch(video, olga).status_code == 200
    refused = fetch(video, bob)
    assert refused.status_code == 403 and "another visitor" in refused.text and marker not in refused.text
    assert fetch(video.with_suffix(".json"), bob).status_code == 403  # the sidecar, with the prompt in it
    assert fetch(studio.outputs.resolve() / "history.sqlite3", olga).status_code == 403
    assert fetch(video, None).status_code in (401, 403)
    # Gradio's own file routes serve nothing of the outputs folder, not even to its owner.
    for route in ("/gradio_api/file=", "/gradio_api/file/"):
        assert httpx.get(f"{studio.url}{route}{video}", cookies=alice.cookies, timeout=30).status_code == 403

    # Exports: alice's export is a link to her file; bob's attempt names no run of his.
    exported, note = alice.predict(run_id=run_id, api_name="/export_json")
    link = re.search(r'href="([^"]+)"', exported).group(1)
    assert not note and marker in httpx.get(html.unescape(link), cookies=alice.cookies, timeout=30).text
    assert marker not in httpx.get(html.unescape(link), cookies=bob.cookies, timeout=30).text
    exported, note = bob.predict(run_id=run_id, api_name="/export_json")
    assert not exported and "cannot export" in note


def test_the_operator_sets_per_visitor_limits_from_the_page_and_a_visitor_over_one_is_told_which(studio):
    bob, olga = client(studio, "bob"), client(studio, "olga")
    limits = {
        "in_flight_slots": None,
        "visitor_max_in_flight": None,
        "visitor_max_queued": 2,
        "visitor_max_videos_per_hour": None,
        "cancel_unsent_on_close": True,
    }
    refused_to_a_visitor(lambda: bob.predict(*limits.values(), api_name="/sharing"))
    assert "Per visitor: queued = 2" in olga.predict(**limits, api_name="/sharing")
    try:
        refused = bob.predict(prompts="one too many", copies=3, concurrency=1, **QUICK, api_name="/generate")
        assert refused.startswith("**cannot generate**") and "at most 2 queued requests per visitor" in refused
        # Operators are held to no per-visitor limit.
        allowed = olga.predict(prompts="an operator's many", copies=3, concurrency=1, **QUICK, api_name="/generate")
        assert allowed.startswith("queued 3 requests")
        bad = olga.predict(**{**limits, "visitor_max_queued": -1}, api_name="/sharing")
        assert bad.startswith("**not applied**") and "Per visitor: queued must be from 1 to 100000, got -1" in bad
    finally:
        olga.predict(**{**limits, "visitor_max_queued": 64}, api_name="/sharing")


def test_guests_are_each_their_own_visitor_and_never_operators(tmp_path):
    guests = start_studio(tmp_path / "outputs", tmp_path / "studio.log", "--allow-anonymous")
    try:
        one, two = Client(guests.url, verbose=False), Client(guests.url, verbose=False)
        marker = "guest-one-91ab"
        assert one.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate").startswith("queued")
        run_id = run_of(guests, marker)
        wait_for(lambda: states(guests, run_id) == ["done"], "the guest's video", RUN_TIMEOUT_S)
        assert marker in history_text(one) and marker not in history_text(two, show="everyone")
        refused_to_a_visitor(lambda: two.predict(api_name="/stop_server"))
    finally:
        stop_studio(guests)


def test_a_space_without_sign_in_tells_visitors_so_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/omni-studio")
    monkeypatch.delenv("OAUTH_CLIENT_ID", raising=False)
    space = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    try:
        visitor = Client(space.url, verbose=False)
        with pytest.raises(AppError, match=r"no sign-in configured.*OMNI_STUDIO_ALLOW_ANONYMOUS"):
            visitor.predict(prompts="not made", copies=1, concurrency=1, **QUICK, api_name="/generate")
        assert rows(space, "SELECT COUNT(*) FROM requests") == [(0,)]
    finally:
        stop_studio(space)
