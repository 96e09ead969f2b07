"""The studio page as a person uses it, in headless Chromium."""

from __future__ import annotations

import re
import sqlite3

import httpx
from playwright.sync_api import expect

from studio.ui.file_guard import FILES_ROUTE
from tests.browser.conftest import start_studio, stop_studio
from tests.studio_process import open_advanced
from tests.waiting import wait_for


def fill_form(page, prompts: str, frames: int, steps: int, copies: int, concurrency: int) -> None:
    page.locator("#prompt textarea").fill(prompts)
    page.locator("#tier").get_by_label("256p").check()
    open_advanced(page)
    page.locator("#frames input").fill(str(frames))
    page.locator("#steps input").fill(str(steps))
    page.locator("#copies input").fill(str(copies))
    page.locator("#concurrency input[type=number]").fill(str(concurrency))
    page.locator("#concurrency input[type=number]").press("Enter")


def test_four_videos_play_and_history_survives_a_restart(browser, tmp_path):
    outputs, log = tmp_path / "outputs", tmp_path / "studio.log"
    studio = start_studio(outputs, log)
    try:
        page = browser.new_page()
        page.goto(studio.url)
        fill_form(page, "a red circle moving left\na blue square moving up", frames=5, steps=2, copies=2, concurrency=4)
        page.locator("#generate").click()
        page.locator("#status").get_by_text("queued 4 requests").wait_for(timeout=60_000)
        page.locator("#stats").get_by_text("4 completed").wait_for(timeout=240_000)
        page.locator("#gallery .thumbnail-item").nth(3).wait_for(timeout=30_000)
        # The status line follows the run to its end, not "queued" for ever.
        expect(page.locator("#status")).to_contain_text("finished: 4 done", timeout=30_000)
        table = page.locator("#requests").inner_text()
        assert table.count("done") >= 4
        # Tiles are the videos' poster frames; the figures are drawn in the page, with a legend entry per phase.
        assert page.locator("#gallery .thumbnail-item img").count() == 4
        assert page.locator("#gallery video").count() == 0
        expect(page.locator("#stats-table")).to_contain_text("p50 s")
        for phase in ("queued at the server", "inference", "download"):
            expect(page.locator("#timeline-plot")).to_contain_text(phase, timeout=30_000)
        expect(page.locator("#latency-plot svg").first).to_be_visible()
        for index in range(4):
            page.locator("#gallery .thumbnail-item").nth(index).click()
            page.wait_for_function(
                "() => { const v = document.querySelector('#video video');"
                " return v && v.readyState >= 2 && v.videoWidth === 320; }",
                timeout=30_000,
            )
        assert "seed" in page.locator("#details").inner_text()
        run_id = re.search(r"run_\w+", page.locator("#status").inner_text()).group(0)
        page.close()
    finally:
        stop_studio(studio)

    studio = start_studio(outputs, log)
    try:
        page = browser.new_page()
        page.goto(studio.url)
        page.get_by_role("tab", name="History").click()
        history = page.locator("#history")
        cell = history.get_by_text(run_id).last
        cell.wait_for(timeout=30_000)
        cell.click()
        expect(page.locator("#history-requests")).to_contain_text("done", timeout=30_000)
        page.close()
    finally:
        stop_studio(studio)


def test_cancel_all_leaves_nothing_running(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
        engine_url = re.search(r"http://127\.0\.0\.1:\d+", page.locator("#engine-status").inner_text()).group(0)
        fill_form(page, "a long one\nanother long one", frames=33, steps=200, copies=2, concurrency=4)
        page.locator("#generate").click()
        expect(page.locator("#requests")).to_contain_text("running", timeout=120_000)
        page.locator("#cancel-all").click()
        page.locator("#stats").get_by_text("4 cancelled").wait_for(timeout=60_000)
        assert "running" not in page.locator("#requests").inner_text()
        metrics = httpx.get(engine_url + "/metrics").text
        assert re.search(r"vllm_omni:num_requests_running\{[^}]*\} 0\.0", metrics)
        assert re.search(r"vllm_omni:num_requests_waiting\{[^}]*\} 0\.0", metrics)
    finally:
        page.close()


def test_prompt_markup_is_shown_not_run(browser, studio_app):
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        page.goto(studio_app.url)
        fill_form(page, "<img src=x onerror=alert(1)>", frames=5, steps=2, copies=1, concurrency=1)
        page.locator("#generate").click()
        page.locator("#stats").get_by_text("1 completed").wait_for(timeout=240_000)
        expect(page.locator("#requests")).to_contain_text("<img src=x onerror=alert(1)>", timeout=30_000)
        page.locator("#gallery .thumbnail-item").first.click()
        page.locator("#details").get_by_text("<img src=x onerror=alert(1)>").first.wait_for(timeout=30_000)
        assert dialogs == []
        assert page.evaluate("() => document.querySelectorAll('img[src=\"x\"]').length") == 0
    finally:
        page.close()


def test_bad_input_gets_a_clear_message(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#prompt textarea").fill("   ")
        page.locator("#generate").click()
        page.locator("#status").get_by_text("write at least one prompt").wait_for(timeout=30_000)
        page.locator("#prompt textarea").fill("a blue square")
        # The advanced fields are folded as the page opens; a problem in one of them unfolds them to show it.
        expect(page.locator("#frames input")).to_be_hidden()
        open_advanced(page)
        page.locator("#frames input").fill("100000")
        page.locator("#advanced").get_by_text("Advanced settings").first.click()
        expect(page.locator("#frames input")).to_be_hidden()
        page.locator("#generate").click()
        page.locator("#status").get_by_text("frames must be between 5 and 400 for 256p").wait_for(timeout=30_000)
        expect(page.locator("#frames input")).to_be_visible(timeout=30_000)
        expect(page.locator("#frames")).to_have_class(re.compile(r"\bfield-problem\b"))
        open_advanced(page)
        page.locator("#frames input").fill("9")
        page.locator("#seed textarea, #seed input").first.fill("abc")
        page.locator("#generate").click()
        page.locator("#status").get_by_text("seed must be a whole number").wait_for(timeout=30_000)
        # Each problem is also said next to its field, and goes once the field is right.
        seed = page.locator("#seed")
        expect(seed).to_have_class(re.compile(r"\bfield-problem\b"), timeout=30_000)
        expect(seed).to_contain_text("seed must be a whole number")
        expect(page.locator("#frames")).not_to_have_class(re.compile(r"\bfield-problem\b"))
        page.locator("#steps input").fill("999")
        page.locator("#generate").click()
        expect(page.locator("#steps")).to_contain_text("steps must be from 1 to 200, got 999", timeout=30_000)
        # Fixed, they lose their marks (the prompt, emptied, takes one: no run is queued by this test).
        page.locator("#steps input").fill("2")
        page.locator("#seed textarea, #seed input").first.fill("")
        page.locator("#prompt textarea").fill("   ")
        page.locator("#generate").click()
        expect(page.locator("#prompt")).to_have_class(re.compile(r"\bfield-problem\b"), timeout=30_000)
        expect(seed).not_to_have_class(re.compile(r"\bfield-problem\b"))
        expect(page.locator("#steps")).not_to_contain_text("must be")
    finally:
        page.close()


def test_history_is_current_without_refresh_and_server_buttons_answer_in_their_tab(browser, studio_app):
    page = browser.new_page()
    try:
        page.goto(studio_app.url)
        page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
        fill_form(page, "a history marker", frames=5, steps=2, copies=1, concurrency=1)
        page.locator("#generate").click()
        run_id = re.search(r"run_\w+", page.locator("#status").get_by_text("queued").inner_text()).group(0)
        page.locator("#stats").get_by_text("1 completed").wait_for(timeout=240_000)
        page.get_by_role("tab", name="History").click()
        expect(page.locator("#history")).to_contain_text(run_id, timeout=30_000)  # no Refresh pressed
        page.locator("#history").get_by_text(run_id).last.click()
        expect(page.locator("#history-requests")).to_contain_text("latency s", timeout=30_000)
        # A past video plays in the page: its poster picked, its player and its settings below.
        page.locator("#history-gallery img").first.click()
        player = page.locator("#history-video video")
        expect(player).to_have_count(1, timeout=30_000)
        assert FILES_ROUTE in (player.get_attribute("src") or "")  # through the studio's guarded file route
        expect(page.locator("#history-video-details")).to_contain_text("a history marker")
        expect(page.locator("#history-video-details")).to_contain_text("seed")
        # Its settings back in the form, to change one thing and make it again.
        seed = re.search(r"seed (\d+)", page.locator("#history-video-details").inner_text()).group(1)
        page.locator("#history-use-settings").click()
        # One event fills the form and shows the Generate tab; the prompt was already the same, so the seed (the
        # form had none: a random one) says the event's values arrived.
        expect(page.get_by_role("tab", name="Generate")).to_have_attribute("aria-selected", "true", timeout=30_000)
        expect(page.locator("#seed textarea")).to_have_value(seed, timeout=30_000)
        expect(page.locator("#prompt textarea")).to_have_value("a history marker")
        expect(page.locator("#frames input")).to_have_value("5")
        expect(page.locator("#generate")).to_be_visible()

        page.get_by_role("tab", name="Server").click()
        page.locator("#server-stop").click()  # asks first: it stops the servers for everyone
        expect(page.locator("#server-stop-question")).to_contain_text("Stop the servers for every visitor?")
        expect(page.locator("#server-state")).to_contain_text("ready")  # asking stopped nothing
        page.locator("#server-stop-confirm").click()
        expect(page.locator("#server-result")).to_contain_text("stopped", timeout=60_000)
        expect(page.locator("#server-stop-ask")).to_be_hidden()
        page.locator("#server-start").click()
        expect(page.locator("#server-result")).to_contain_text("started", timeout=120_000)
        expect(page.locator("#server-state")).to_contain_text("ready", timeout=30_000)
        page.get_by_role("tab", name="Generate").click()
        assert "start" not in page.locator("#status").inner_text()
        # Loading the page leaves nothing for the terminal: no warning of Gradio's about the page's own events.
        assert "UserWarning" not in studio_app.log.read_text()
    finally:
        page.close()


def test_closing_the_tab_on_loopback_keeps_the_queued_work(browser, studio_app):
    """The one operator at the keyboard (no sign-in) closes the tab while work waits in the studio: it is kept
    and made (a page with sign-in cancels a visitor's unsent work when their last page closes)."""
    page = browser.new_page()
    page.goto(studio_app.url)
    # Two requests one at a time: the first long enough to be running when the tab closes, the second waiting.
    fill_form(page, "kept when the tab closes", frames=33, steps=60, copies=2, concurrency=1)
    page.locator("#generate").click()
    page.locator("#status").get_by_text("queued 2 requests").wait_for(timeout=60_000)
    run_id = re.search(r"run_\w+", page.locator("#status").inner_text()).group(0)
    expect(page.locator("#requests")).to_contain_text("waiting in the studio", timeout=60_000)
    page.close(run_before_unload=True)

    def states() -> list[str]:
        with sqlite3.connect(studio_app.outputs / "history.sqlite3") as db:
            query = "SELECT state FROM requests WHERE run_id = ? ORDER BY position"
            return [state for (state,) in db.execute(query, (run_id,))]

    wait_for(lambda: all(state in ("done", "failed", "cancelled") for state in states()), "the run's end", 240)
    assert states() == ["done"] * 2
