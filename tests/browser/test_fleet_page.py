"""The Server view of a studio running two embedded replicas, in headless Chromium: both listed, one restarted
while the other serves."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form


def test_the_server_view_lists_two_replicas_and_restarts_one_while_the_other_serves(browser, tmp_path):
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log", "--replicas", "2", "--engine-threads", "1")
    page = browser.new_page()
    try:
        page.goto(studio.url)
        expect(page.locator("#engine-status")).to_contain_text("2 of 2 ready", timeout=180_000)
        expect(page.locator("#engine-status")).to_contain_text("2 x embedded on the CPU")
        fill_form(page, "a red circle while a replica restarts", frames=9, steps=40, copies=4, concurrency=4)
        page.locator("#generate").click()
        page.locator("#status").get_by_text("queued 4 requests").wait_for(timeout=60_000)

        page.get_by_role("tab", name="Server").click()
        table = page.locator("#server-metrics")
        expect(table).to_contain_text("127.0.0.1", timeout=30_000)
        # One row per replica, each with its own address.
        page.wait_for_function(
            "() => new Set(document.querySelector('#server-metrics').innerText.match(/127\\.0\\.0\\.1:\\d+/g)"
            " || []).size === 2",
            timeout=30_000,
        )
        page.locator("#replica-index input").fill("1")
        page.locator("#replica-restart").click()
        expect(page.locator("#replica-result")).to_contain_text("replica 1 restarted", timeout=180_000)
        expect(page.locator("#engine-status")).to_contain_text("2 of 2 ready", timeout=60_000)

        page.get_by_role("tab", name="Generate").click()
        # Replica 0 served throughout: the run ends with videos, whatever replica 1 was doing when it restarted.
        expect(page.locator("#stats")).to_contain_text("completed", timeout=240_000)
        expect(page.locator("#stats")).to_contain_text("0 in flight", timeout=240_000)
        assert "0 completed" not in page.locator("#stats").inner_text()
    finally:
        page.close()
        stop_studio(studio)
