"""Videos as they form: each running request's tile shows its latest preview, the Selected video area shows a
selected one larger with Cancel beside it, and a visitor's previews reach no other visitor (page or API)."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form
from tests.waiting import wait_for

ACCOUNTS = {"ann": "ann-pass", "ben": "ben-pass"}
MARKER = "preview-of-ann-7c1d"


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("previews-page")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    # Previews as often as the engine makes steps: a short run still shows several.
    running = start_studio(
        folder / "outputs", folder / "studio.log", *accounts, env={"OMNI_STUDIO_ENGINE_PREVIEW_INTERVAL_S": "0.1"}
    )
    yield running
    stop_studio(running)


def signed_in(browser, studio, user: str):
    context = browser.new_context()
    login = context.request.post(f"{studio.url}/login", form={"username": user, "password": ACCOUNTS[user]})
    assert login.ok, login.text()
    page = context.new_page()
    page.goto(studio.url)
    expect(page.locator("#who")).to_contain_text(user, timeout=60_000)
    expect(page.locator("#engine-status")).to_contain_text(re.compile(r"\bready\b"), timeout=180_000)
    return context, page


def api_call(context, url: str, name: str, *data) -> str:
    """One call of the studio's API with the context's cookies (its session): the stream's text."""
    started = context.request.post(
        f"{url}/gradio_api/call/{name}",
        data=json.dumps({"data": list(data)}),
        headers={"Content-Type": "application/json"},
    )
    assert started.ok, started.text()
    return context.request.get(f"{url}/gradio_api/call/{name}/{started.json()['event_id']}").text()


def test_a_preview_forms_while_a_request_runs_and_the_selected_one_can_be_cancelled(browser, studio):
    context, page = signed_in(browser, studio, "ann")
    other_context, other = signed_in(browser, studio, "ben")
    try:
        fill_form(
            page,
            f"a red circle moving left on a white background {MARKER}",
            frames=33,
            steps=200,
            copies=2,
            concurrency=1,
        )
        page.locator("#generate").click()
        tile = page.locator("#running .running-tile img.preview-image").first
        expect(tile).to_be_visible(timeout=120_000)
        first_step = int(tile.get_attribute("data-step") or -1)
        first_image = tile.get_attribute("src")
        wait_for(
            lambda: int(page.locator("#running img.preview-image").first.get_attribute("data-step") or -1) > first_step,
            "a later preview in the running tile",
            60,
        )
        assert page.locator("#running img.preview-image").first.get_attribute("src") != first_image
        box = tile.bounding_box()
        assert box is not None and abs(box["width"] / box["height"] - 320 / 192) < 0.05  # 256p 16:9 is 320x192

        # The other visitor's page shows none of it, and the API refuses them the preview.
        assert other.locator("#running img").count() == 0
        assert MARKER not in other.content()
        record = json.loads(api_call(context, studio.url, "run_status", _latest_run_id(page)).split("data: ", 1)[1])[0]
        running = next(r for r in record["requests"] if r["state"] == "running")
        mine = api_call(context, studio.url, "preview", running["id"])
        assert "data:image/" in mine
        theirs = api_call(other_context, studio.url, "preview", running["id"])
        assert "event: error" in theirs and "data:image/" not in theirs and "of yours" in theirs

        # Selected in the table, the running request forms in the Selected video area, with Cancel beside it.
        page.locator("#requests").get_by_text("running").first.click()
        forming = page.locator("#video .selected-forming img.preview-image")
        expect(forming).to_be_visible(timeout=30_000)
        step = int(forming.get_attribute("data-step") or -1)
        wait_for(
            lambda: int(page.locator("#video .selected-forming img").get_attribute("data-step") or -1) > step,
            "the selected request's preview moving on",
            60,
        )
        page.locator("#cancel-selected").click()
        expect(page.locator("#status")).to_contain_text("cancelled", timeout=60_000)
        assert other.locator("#running img").count() == 0 and MARKER not in other.content()
    finally:
        page.close()
        other.close()
        context.close()
        other_context.close()


def _latest_run_id(page) -> str:
    match = re.search(r"run_\d{8}_\d{6}_[0-9a-f]{6}", page.locator("#status").inner_text())
    assert match, page.locator("#status").inner_text()
    return match.group(0)
