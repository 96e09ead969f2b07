"""A person opens the page, types a prompt, picks a tier, and a video plays."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.browser


def test_generate_plays_a_video(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#prompt textarea").fill("a red circle moving left on a white background")
        page.locator("#tier").get_by_label("256p").check()
        page.locator("#frames input").fill("9")
        page.locator("#steps input").fill("2")
        page.locator("#generate").click()
        status = page.locator("#status")
        status.get_by_text("done", exact=False).wait_for(timeout=180_000)
        video = page.locator("#video video")
        video.wait_for(timeout=30_000)
        page.wait_for_function(
            "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }",
            timeout=30_000,
        )
        size = page.evaluate(
            "() => { const v = document.querySelector('#video video'); "
            "return [v.videoWidth, v.videoHeight, v.duration]; }"
        )
        assert size[:2] == [320, 192] and size[2] > 0
        assert "inference" in status.inner_text() and "9 frames" in status.inner_text()
        sidecars = list(studio_app.outputs.glob("videos/*/*.json"))
        assert len(sidecars) == 1
        sidecar = json.loads(sidecars[0].read_text())
        assert sidecar["parameters"]["prompt"] == "a red circle moving left on a white background"
        assert "Omni Studio: open http://127.0.0.1:" in studio_app.log.read_text()
    finally:
        page.close()


def test_bad_input_gets_a_clear_message(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#prompt textarea").fill("   ")
        page.locator("#generate").click()
        page.locator("#status").get_by_text("write at least one prompt").wait_for(timeout=30_000)
    finally:
        page.close()


def test_out_of_range_frames_are_explained(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#prompt textarea").fill("a blue square")
        page.locator("#frames input").fill("100000")
        page.locator("#generate").click()
        page.locator("#status").get_by_text("frames must be between 5 and 400 for 256p").wait_for(timeout=30_000)
        page.locator("#frames input").fill("9")
        page.locator("#steps input").fill("0")
        page.locator("#generate").click()
        page.locator("#status").get_by_text("greater than or equal to 1").wait_for(timeout=30_000)
    finally:
        page.close()
