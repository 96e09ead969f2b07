"""The Bench tab after a reload: the last bench's results come back (table with its intervals, recommendation,
status), the variants box speaks the running engine's flags, a plan of the studio's own servers answers without
command line flags, and the studio's log stays clean (no event short of output values)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.studio_process import run_small_bench

INTERVAL = re.compile(r"\d\.\d\d \(\d\.\d\d–\d\.\d\d\)")


def test_the_last_bench_is_shown_again_after_a_reload(browser, studio_app):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(studio_app.url)
        page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
        page.get_by_role("tab", name="Bench").click()
        # The studio runs the embedded engine: its own levers, not vLLM-Omni's serve flags.
        variants = page.locator("#bench-variants textarea")
        expect(variants).to_have_attribute("placeholder", re.compile("--step-cache"))
        run_small_bench(page, requests=3, concurrency="1")
        expect(page.locator("#bench-summary")).to_contain_text(INTERVAL)
        status = page.locator("#bench-status").inner_text()

        page.reload()
        page.get_by_role("tab", name="Bench").click()
        expect(page.locator("#bench-status")).to_have_text(status, timeout=30_000)
        expect(page.locator("#bench-summary")).to_contain_text(INTERVAL)
        expect(page.locator("#bench-recommendation")).to_contain_text("256p: lowest latency at concurrency 1")
        expect(page.locator("#bench-report")).to_contain_text("Download report.json")
        expect(variants).to_have_attribute("placeholder", re.compile("--step-cache"))

        # A plan of the bench of the studio's servers as they are: its own layout, in the page's words.
        page.locator("#bench-plan").get_by_text("Plan: the fleet for a rate and an SLO").click()
        page.locator("#bench-plan-rate input").fill("1")
        page.locator("#bench-plan-slo input").fill("600")
        page.locator("#bench-plan-run").click()
        result = page.locator("#bench-plan-result")
        expect(result).to_contain_text("recommended: 1x1 base", timeout=120_000)
        assert not re.search(r"(?<![\w-])--[a-z]", result.inner_text())
    finally:
        page.close()
