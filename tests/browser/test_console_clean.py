"""The page throws nothing in the browser while videos are made and shown: no uncaught error (Gradio's plots once
read the size of a plot taken out of the page when a new run emptied it) and no error on the console."""

from __future__ import annotations

import re

from playwright.sync_api import ConsoleMessage, Error, expect

from tests.browser.test_studio_page import fill_form


def make_and_show_a_video(page, prompt: str, away: str | None = None) -> None:
    """A short 256p video from the form, waited for until its run is finished and it plays in the page; with
    `away`, that tab is shown while it is made (its figures are then drawn while the Generate tab is hidden)."""
    fill_form(page, prompt, frames=9, steps=4, copies=1, concurrency=1)
    before = page.locator("#status").inner_text()  # the line of the run before, if any
    page.locator("#generate").click()
    expect(page.locator("#status")).not_to_have_text(before, timeout=60_000)
    run_id = re.search(r"run_\w+", page.locator("#status").get_by_text("queued").inner_text()).group(0)
    if away is not None:
        page.get_by_role("tab", name=away).click()
        expect(page.locator("#history")).to_contain_text(run_id, timeout=240_000)  # listed once it has ended
        page.get_by_role("tab", name="Generate").click()
    expect(page.locator("#status")).to_contain_text("finished: 1 done", timeout=240_000)
    expect(page.locator("#timeline-plot")).to_contain_text("inference", timeout=30_000)  # the plots drawn
    page.locator("#gallery .thumbnail-item").first.click()
    page.wait_for_function(
        "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }", timeout=30_000
    )


def test_making_and_showing_videos_throws_nothing(browser, studio_app):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    thrown: list[str] = []
    page.on("pageerror", lambda error: thrown.append(f"uncaught: {error}" if isinstance(error, Error) else str(error)))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            thrown.append(f"console: {message.text}")

    page.on("console", on_console)
    try:
        page.goto(studio_app.url)
        page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
        # Three runs, each starting with its plots empty (its latest run has nothing finished yet) and drawing them
        # again; the second made while History is shown: its plots are drawn in a hidden tab, and the third run
        # empties them (where an empty plot was once taken out of the page, Gradio's plot then read the size of
        # what was gone, once per plot).
        make_and_show_a_video(page, "a red circle moving left on a white background")
        make_and_show_a_video(page, "a green circle growing on a white background", away="History")
        make_and_show_a_video(page, "two blue squares moving up on black")
        # The other tabs, each shown until its first part is drawn, then back.
        for tab, shown in (("History", "#history"), ("Server", "#server-state"), ("Bench", "#bench-run")):
            page.get_by_role("tab", name=tab).click()
            expect(page.locator(shown)).to_be_visible(timeout=30_000)
        page.get_by_role("tab", name="Generate").click()
        expect(page.locator("#latency-plot svg").first).to_be_visible(timeout=30_000)
        assert thrown == [], f"the page threw: {thrown}"
    finally:
        page.close()
