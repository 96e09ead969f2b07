"""The page on a Cosmos Framework server (the contract's test double), in headless Chromium: a video made from
the form plays, its row says latency only, and the guardrails switch says why it cannot be used."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form
from tests.integration.test_cosmos_framework import cosmos_server

pytestmark = pytest.mark.browser


def test_a_cosmos_framework_video_made_from_the_page_plays(browser, tmp_path):
    with cosmos_server(tmp_path, delay_s=1.0) as server:
        studio = start_studio(
            tmp_path / "outputs", tmp_path / "studio.log", "--engine", "cosmos-framework", "--url", server.url
        )
        page = browser.new_page()
        try:
            page.goto(studio.url)
            expect(page.locator("#guardrails input")).to_be_disabled(timeout=60_000)
            fill_form(page, "a red circle moving left", frames=9, steps=2, copies=1, concurrency=1)
            page.locator("#generate").click()
            page.locator("#stats").get_by_text("1 completed").wait_for(timeout=120_000)
            expect(page.locator("#requests")).to_contain_text("latency only")
            page.locator("#gallery .thumbnail-item").first.click()
            page.wait_for_function(
                "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }",
                timeout=30_000,
            )
        finally:
            page.close()
            stop_studio(studio)
