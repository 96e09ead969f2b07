"""How often each visitor's page shows fresh figures while many requests are in flight.

A real studio (`omni-studio ui` on its embedded engine, one account per visitor) and one headless Chromium context
per visitor. Each page counts the updates of its requests table (a MutationObserver; updates closer than 0.2 s
are one). Two phases in one run: the baseline, one visitor with one request in flight; then `--visitors`
visitors with `--in-flight` requests in flight together (each submits its share at once, long enough to stay in
flight). Reported per visitor: updates per second and the gaps between updates. The page asks every second.

Usage: python benchmarks/cpu/page_refresh.py [--visitors 3] [--in-flight 64] [--window 20]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from tests.studio_process import CHROMIUM, FOREGROUND_ARGS, open_advanced, start_studio, stop_studio
from tests.studio_process import CHROMIUM_ARGS as BASE_CHROMIUM_ARGS

# Each visitor has a browser of their own: none of the pages is a background tab.
CHROMIUM_ARGS = [*BASE_CHROMIUM_ARGS, *FOREGROUND_ARGS]
OBSERVE = """() => {
  window.__updates = [];
  const table = document.querySelector('#requests');
  new MutationObserver(() => {
    const now = performance.now(), last = window.__updates[window.__updates.length - 1];
    if (last === undefined || now - last > 200) window.__updates.push(now);
  }).observe(table, {subtree: true, childList: true, characterData: true});
}"""


def open_page(browser, url: str, account: str):
    user, password = account.split(":")
    context = browser.new_context()
    assert context.request.post(f"{url}/login", form={"username": user, "password": password}).ok
    page = context.new_page()
    page.goto(url)
    page.locator("#who").get_by_text(user).wait_for(timeout=60_000)
    page.locator("#engine-status").get_by_text(re.compile(r"\bready\b")).wait_for(timeout=180_000)
    return page


def submit(page, prompt: str, copies: int) -> None:
    page.locator("#prompt textarea").fill(prompt)
    # Long (the tier's 189 frames at 200 steps: about half a minute each on a CPU): everything stays in flight while
    # the pages are watched.
    open_advanced(page)
    page.locator("#frames input").fill("189")
    page.locator("#steps input").fill("200")
    page.locator("#copies input").fill(str(copies))
    page.locator("#concurrency input[type=number]").fill(str(copies))
    page.locator("#concurrency input[type=number]").press("Enter")
    page.locator("#generate").click()
    page.locator("#status").get_by_text(f"queued {copies} request").wait_for(timeout=60_000)


def watch(pages: list, window_s: float) -> list[list[float]]:
    """Each page's update times (s) within one window, all pages watched together."""
    for page in pages:
        page.evaluate(OBSERVE)
    time.sleep(window_s)  # the measurement window itself, not a synchronisation
    return [[t / 1000 for t in page.evaluate("window.__updates")] for page in pages]


def row(phase: str, visitor: str, updates: list[float], window_s: float) -> str:
    gaps = [b - a for a, b in itertools.pairwise(updates)]
    median = statistics.median(gaps) if gaps else float("nan")
    worst = max(gaps) if gaps else float("nan")
    return f"| {phase} | {visitor} | {len(updates) / window_s:.2f} | {median:.2f} | {worst:.2f} |"


def main(args: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        raise SystemExit(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    accounts = [f"visitor{i}:pass{i}" for i in range(1, args.visitors + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        flags = [flag for account in accounts for flag in ("--auth", account)]
        studio = start_studio(Path(tmp) / "outputs", Path(tmp) / "studio.log", *flags, timeout_s=180)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                pages = [open_page(browser, studio.url, account) for account in accounts]
                print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
                print("| phase | visitor | updates per s | median gap (s) | largest gap (s) |")
                print("|---|---|---|---|---|")
                submit(pages[0], "a red circle, the baseline", 1)
                (baseline,) = watch(pages[:1], args.window)
                print(row("1 visitor, 1 in flight", "visitor1", baseline, args.window), flush=True)
                pages[0].locator("#cancel-all").click()
                # The status line says how the cancel ended before the next run's line can take its place.
                pages[0].locator("#status").get_by_text(re.compile("cancelled|nothing in flight")).wait_for(
                    timeout=60_000
                )
                shares = [
                    args.in_flight // args.visitors + (i < args.in_flight % args.visitors) for i in range(args.visitors)
                ]
                for page, copies, number in zip(pages, shares, range(1, args.visitors + 1), strict=True):
                    submit(page, f"a blue square of visitor {number}", copies)
                loaded = watch(pages, args.window)
                for number, updates in enumerate(loaded, 1):
                    phase = f"{args.visitors} visitors, {args.in_flight} in flight"
                    print(row(phase, f"visitor{number}", updates, args.window), flush=True)
                print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
                for page in pages:
                    page.locator("#cancel-all").click()
                browser.close()
        finally:
            stop_studio(studio)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--visitors", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=64, help="requests in flight, all visitors together")
    parser.add_argument("--window", type=float, default=20.0, help="seconds each phase is watched")
    main(parser.parse_args())
