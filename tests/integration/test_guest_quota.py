"""Guests of a real studio (--allow-anonymous) cannot renew their quota by dropping the cookie: guests of one
client address share the videos per hour (and the queue and the turn), while each sees only its own work; and an
address may start only so many new guests an hour, the one past it refused with nothing recorded."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from studio.ui.file_guard import BROWSER_COOKIE
from tests.browser.conftest import RunningStudio, start_studio, stop_studio

QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}
# Identities the test makes before it looks for the limit: two guests, and four callers without a cookie, each of
# which may be seen once more by the cookie its client was given (its heartbeat's page closes with it).
NEW_GUESTS = 11
HOURLY = "at most 2 videos per hour per visitor"


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("guest-quota")
    flags = [
        "--allow-anonymous",
        "--visitor-max-videos-per-hour",
        "2",
        "--new-guests-per-address-per-hour",
        str(NEW_GUESTS),
    ]
    running = start_studio(folder / "outputs", folder / "studio.log", *flags)
    yield running
    stop_studio(running)


def guest(studio: RunningStudio, cookie: str) -> Client:
    return Client(studio.url, verbose=False, httpx_kwargs={"cookies": {BROWSER_COOKIE: cookie}})


def generate(client: Client, marker: str) -> str:
    return client.predict(prompts=marker, copies=1, concurrency=1, **QUICK, api_name="/generate")


def recorded(studio: RunningStudio, marker: str) -> int:
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        return db.execute("SELECT COUNT(*) FROM requests WHERE prompt LIKE ?", (f"%{marker}%",)).fetchone()[0]


def test_a_guest_who_drops_its_cookie_keeps_its_addresss_quota_and_new_guests_are_bounded(studio):
    first = guest(studio, "FIRSTguestCookie_aaaaaaaaaa")  # guest 1 of the address
    assert generate(first, "quota-one-1f").startswith("queued")
    assert generate(first, "quota-two-1f").startswith("queued")
    assert HOURLY in generate(first, "quota-three-1f")

    # The cookie dropped: a new guest of the same address, with the same quota; and its own history.
    second = guest(studio, "SECONDguestCookie_bbbbbbbbb")  # guest 2
    refused = generate(second, "quota-second-1f")
    assert "at most 2 videos per hour per visitor, shared by the guests of one address; you have asked for 2" in refused
    assert "quota-one-1f" in str(first.predict(show="mine", api_name="/history"))
    assert "quota-one-1f" not in str(second.predict(show="mine", api_name="/history"))

    # No cookie at all, a new page session each time: each a new guest, none given a video.
    for attacker in range(4):  # guests 3 to 6
        client = Client(studio.url, verbose=False)
        client.cookies.clear()
        client.session_hash = f"attacker{attacker}"
        assert HOURLY in generate(client, f"quota-attacker{attacker}-1f")
    assert recorded(studio, "quota-second-1f") == 0 and recorded(studio, "quota-attacker") == 0

    # New guests come until the address has started its NEW_GUESTS this hour; then one is refused, and nothing of
    # it is kept.
    refused = None
    for number in range(NEW_GUESTS):
        try:
            assert HOURLY in generate(guest(studio, f"LATERguestCookie_{number:08d}"), f"quota-later{number}-1f")
        except AppError as error:
            refused = number
            assert "too many new guests from your address in the last hour (at most 11" in str(error)
            break
    assert refused is not None and refused <= NEW_GUESTS - 6, refused
    assert recorded(studio, "quota-later") == 0
    # Guests it knows carry on.
    assert "quota-one-1f" in str(first.predict(show="mine", api_name="/history"))
