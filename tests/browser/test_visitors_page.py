"""Two signed-in visitors and an operator on one studio, each in their own headless Chromium context."""

from __future__ import annotations

import sqlite3

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form
from tests.studio_process import open_advanced
from tests.waiting import wait_for

ACCOUNTS = {"alice": "alice-pass", "bob": "bob-pass", "olga": "olga-pass"}
MARKER = "marker-of-alice-5b0f"
TABS = ("Generate", "History")
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("visitors-page")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "olga")
    yield running
    stop_studio(running)


def signed_in_page(browser, studio, user: str):
    context = browser.new_context()
    login = context.request.post(f"{studio.url}/login", form={"username": user, "password": ACCOUNTS[user]})
    assert login.ok, login.text()
    page = context.new_page()
    page.goto(studio.url)
    expect(page.locator("#who")).to_contain_text(user, timeout=60_000)
    return page


def states(studio, marker: str) -> list[str]:
    with sqlite3.connect(studio.outputs / "history.sqlite3") as db:
        query = "SELECT state FROM requests WHERE prompt LIKE ? ORDER BY created_at, position"
        return [state for (state,) in db.execute(query, (f"%{marker}%",))]


def every_tab_text(page) -> str:
    texts = []
    for name in TABS:
        page.get_by_role("tab", name=name).click()
        texts.append(page.locator("body").inner_text())
    page.get_by_role("tab", name="Generate").click()
    return "\n".join(texts)


def test_visitors_see_only_their_own_work_and_the_operator_sees_all(browser, studio):
    alice = signed_in_page(browser, studio, "alice")
    expect(alice.locator("#who")).to_contain_text("visitor")
    # The studio keeps the guardrail on for visitors (--visitor-guardrails forced): their switch says so.
    open_advanced(alice)
    expect(alice.locator("#guardrails input")).to_be_disabled(timeout=30_000)
    expect(alice.locator("#guardrails input")).to_be_checked()
    expect(alice.locator("#guardrails")).to_contain_text("its operator decides")
    fill_form(alice, f"a red circle {MARKER}", frames=33, steps=200, copies=3, concurrency=1)
    alice.locator("#generate").click()
    alice.locator("#status").get_by_text("queued 3 requests").wait_for(timeout=60_000)
    expect(alice.locator("#requests")).to_contain_text(MARKER, timeout=30_000)
    expect(alice.locator("#standing")).to_contain_text("of yours queued", timeout=30_000)

    bob = signed_in_page(browser, studio, "bob")
    expect(bob.get_by_role("tab", name="Server")).to_have_count(0)
    expect(bob.get_by_role("tab", name="Bench")).to_have_count(0)
    fill_form(bob, "a blue square of bob", frames=5, steps=2, copies=1, concurrency=1)
    bob.locator("#generate").click()
    expect(bob.locator("#requests")).to_contain_text("a blue square of bob", timeout=60_000)
    assert MARKER not in every_tab_text(bob)
    bob.locator("#cancel-all").click()
    expect(bob.locator("#status")).not_to_contain_text("cancelling", timeout=60_000)
    assert "cancelled" not in states(studio, MARKER)  # bob's Cancel all touched nothing of alice's

    olga = signed_in_page(browser, studio, "olga")
    expect(olga.locator("#who")).to_contain_text("operator")
    open_advanced(olga)
    expect(olga.locator("#guardrails input")).to_be_enabled()
    expect(olga.get_by_role("tab", name="Server")).to_be_visible()
    assert MARKER not in olga.locator("#requests").inner_text()  # mine, until the operator asks for everyone's
    olga.locator("#show").get_by_label("everyone").check()
    expect(olga.locator("#requests")).to_contain_text(MARKER, timeout=30_000)
    expect(olga.locator("#requests")).to_contain_text("a blue square of bob", timeout=30_000)
    olga.locator("#cancel-all").click()
    wait_for(lambda: "cancelled" in states(studio, MARKER), "the operator's cancel of alice's requests", RUN_TIMEOUT_S)
    for page in (alice, bob, olga):
        page.context.close()


def test_closing_the_page_cancels_what_was_not_sent_and_lets_the_running_one_finish(browser, studio):
    marker = "closing-7e2a"
    alice = signed_in_page(browser, studio, "alice")
    fill_form(alice, f"a green circle {marker}", frames=9, steps=40, copies=4, concurrency=1)
    alice.locator("#generate").click()
    alice.locator("#status").get_by_text("queued 4 requests").wait_for(timeout=60_000)
    wait_for(
        lambda: set(states(studio, marker)) & {"queued", "running"}, "the first request at the engine", RUN_TIMEOUT_S
    )
    alice.context.close()
    wait_for(
        lambda: all(s in ("done", "cancelled", "failed") for s in states(studio, marker)),
        "the run to end",
        RUN_TIMEOUT_S,
    )
    ended = states(studio, marker)
    assert ended[0] == "done" and ended[1:] == ["cancelled"] * 3, ended
