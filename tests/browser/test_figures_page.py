"""The Generate tab's figures in headless Chromium: latency counts from pressing Generate, the wait in the
studio's own queue included, as the requests table's elapsed time does."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.studio_process import open_advanced
from tests.waiting import wait_for

# The rows of a gr.Dataframe as the page shows them, keyed by its headers (its body is a virtual list of rows).
TABLE_ROWS = """(selector) => {
  const table = document.querySelector(selector);
  const heads = [...table.querySelectorAll('th[role=columnheader]')].map((cell) => cell.innerText.trim());
  return [...table.querySelectorAll('[role=row].virtual-row')].map((row) => Object.fromEntries(
    [...row.querySelectorAll('[role=gridcell]')].map((cell, i) => [heads[i], cell.innerText.trim()])));
}"""


def table_rows(page, selector: str) -> list[dict[str, str]]:
    return page.evaluate(TABLE_ROWS, selector)


def test_copies_at_concurrency_one_count_their_wait_in_the_studio(browser, studio_app):
    copies = 3
    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    try:
        page.goto(studio_app.url)
        page.locator("#prompt textarea").fill("a red circle moving left")
        page.locator("#tier").get_by_label("256p").check()
        open_advanced(page)
        page.locator("#frames input").fill("5")
        page.locator("#steps input").fill("2")
        page.locator("#copies input").fill(str(copies))
        page.locator("#concurrency input[type=number]").fill("1")
        page.locator("#concurrency input[type=number]").press("Enter")
        page.locator("#generate").click()
        page.locator("#stats").get_by_text(f"{copies} completed").wait_for(timeout=240_000)

        def latest_run() -> dict[str, str] | None:
            rows = {row.get("figures of"): row for row in table_rows(page, "#stats-table")}
            row = rows.get("latest run")
            return row if row and row.get("videos") == str(copies) else None

        stats = wait_for(latest_run, "the statistics of the run's three videos", 30)
        requests = wait_for(
            lambda: (rows := table_rows(page, "#requests")) and all(r["state"] == "done" for r in rows) and rows,
            "every request done in the requests table",
            30,
        )
        assert len(requests) == copies and "owner" not in requests[0]  # a visitor's own view names no owner
        elapsed = sorted(float(row["elapsed s"]) for row in requests)
        # One at a time: the later copies waited in the studio for the earlier ones.
        assert max(float(row["studio wait s"]) for row in requests) > 0
        # The largest latency is at least the last request's elapsed time, each as rounded for the page (elapsed to
        # a tenth, the figures to a hundredth: half of each step, and a little for the float's own rounding).
        rounding = 0.05 + 0.005 + 1e-9
        assert float(stats["max s"]) >= elapsed[-1] - rounding
        assert float(stats["in flight s"]) >= elapsed[-1] - rounding  # its throughput's window, named beside it
        # The plots cover the latest run by default; the control beside them offers the session.
        expect(page.locator("#figures-span").get_by_label("latest run")).to_be_checked()
        expect(page.locator("#latency-plot svg").first).to_be_visible(timeout=30_000)
        expect(page.locator("#throughput-plot svg").first).to_be_visible(timeout=30_000)
        page.locator("#figures-span").get_by_label("session").check()
        expect(page.locator("#timeline-plot")).to_contain_text("waiting in the studio", timeout=30_000)
    finally:
        page.close()
