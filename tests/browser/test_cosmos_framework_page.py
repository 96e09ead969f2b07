"""The page on a Cosmos Framework server (the contract's test double), in headless Chromium: the image for
image-to-video is asked for as a URL (no upload, and the page says why), a video made from the form with one plays,
its row says latency only, and the guardrails switch says why it cannot be used."""

from __future__ import annotations

from playwright.sync_api import expect

from studio.backend.runs.spec import NO_UPLOAD
from tests.browser.conftest import start_studio, stop_studio
from tests.browser.test_studio_page import fill_form
from tests.integration.test_cosmos_framework import cosmos_server, image_host
from tests.studio_process import open_advanced


def test_a_cosmos_framework_video_made_from_an_image_url_in_the_page_plays(browser, tmp_path):
    with cosmos_server(tmp_path, delay_s=1.0) as server, image_host(tmp_path) as host:
        studio = start_studio(
            tmp_path / "outputs", tmp_path / "studio.log", "--engine", "cosmos-framework", "--url", server.url
        )
        page = browser.new_page()
        try:
            page.goto(studio.url)
            open_advanced(page)
            expect(page.locator("#guardrails input")).to_be_disabled(timeout=60_000)
            # The URL field, with the reason there is no upload; no upload.
            expect(page.locator("#image-url")).to_be_visible()
            expect(page.locator("#image-url")).to_contain_text(NO_UPLOAD)
            expect(page.locator("#image")).to_be_hidden()
            fill_form(page, "a red circle moving left", frames=9, steps=2, copies=1, concurrency=1)
            page.locator("#image-url input, #image-url textarea").fill(host.url)
            page.locator("#generate").click()
            page.locator("#stats").get_by_text("1 completed").wait_for(timeout=120_000)
            expect(page.locator("#requests")).to_contain_text("latency only")
            (body,) = server.bodies()
            assert (body["vision_path"], body["model_mode"]) == (host.url, "image2video")
            page.locator("#gallery .thumbnail-item").first.click()
            page.wait_for_function(
                "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }",
                timeout=30_000,
            )
        finally:
            page.close()
            stop_studio(studio)
