"""Screenshots of the studio's page for the docs site: the studio started as a user starts it (on loopback, with a
temporary outputs folder), one video made from the Generate tab and a small bench from the Bench tab, then a PNG of each tab at 1440 px wide
(or --width) in docs/images/; the Bench tab's with its results in view. Needs Chromium (/usr/bin/chromium, or OMNI_STUDIO_CHROMIUM) and Playwright.

    nice -n 19 .venv/bin/python scripts/page_screenshots.py
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's root: `studio`, `tests`

from tests.studio_process import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    open_advanced,
    run_small_bench,
    start_studio,
    stop_studio,
)

IMAGES = ROOT / "docs" / "images"
WIDTH, HEIGHT = 1440, 1000
# Tab name -> file name; the page's own tab labels.
TABS = {
    "Generate": "page-generate.png",
    "History": "page-history.png",
    "Server": "page-server.png",
    "Bench": "page-bench.png",
}


def make_one_video(page) -> str:
    """A short 256p video from the Generate tab, waited for until it plays; its run's id."""
    page.locator("#prompt textarea").fill("a red circle moving left on a white background")
    page.locator("#tier").get_by_label("256p").check()
    open_advanced(page)
    page.locator("#frames input").fill("9")
    page.locator("#steps input").fill("4")
    page.locator("#copies input").fill("1")
    page.locator("#generate").click()
    run_id = re.search(r"run_\w+", page.locator("#status").get_by_text("queued").inner_text()).group(0)
    page.locator("#stats").get_by_text("1 completed").wait_for(timeout=300_000)
    page.locator("#gallery .thumbnail-item").first.wait_for(timeout=30_000)
    page.locator("#gallery .thumbnail-item").first.click()
    page.wait_for_function(
        "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }", timeout=30_000
    )
    return run_id


def open_in_history(page, run_id: str) -> None:
    """The History tab with the run picked and its video playing, as a person would leave it."""
    page.locator("#history").get_by_text(run_id).last.wait_for(timeout=60_000)
    page.locator("#history").get_by_text(run_id).last.click()
    page.locator("#history-requests").get_by_text("latency s").wait_for(timeout=30_000)
    page.locator("#history-gallery img").first.click()
    page.locator("#history-video video").wait_for(timeout=30_000)


def shoot(url: str, images: Path, width: int = WIDTH, full_page: bool = False) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": HEIGHT})
            page.goto(url)
            run_id = make_one_video(page)
            run_small_bench(page)
            for tab, name in TABS.items():
                page.get_by_role("tab", name=tab).click()
                if tab == "History":
                    open_in_history(page, run_id)
                page.wait_for_timeout(1500)  # the tab's tables and figures fill in after it shows
                if tab == "Bench":
                    page.locator("#bench-status").evaluate("status => status.scrollIntoView({block: 'start'})")
                path = images / (name if width == WIDTH else name.replace(".png", f"-{width}.png"))
                # The viewport alone unless asked, not the whole scrolled page: the PNGs stay small.
                page.screenshot(path=str(path), full_page=full_page)
                written.append(path)
        finally:
            browser.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=IMAGES, help="where the PNGs go (default: docs/images/)")
    parser.add_argument("--width", type=int, default=WIDTH, help="the window's width in px (default: %(default)s)")
    parser.add_argument("--full-page", action="store_true", help="the whole page of each tab, not the window")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="how long the studio may take to answer")
    args = parser.parse_args()
    args.images.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="omni-studio-shots-") as folder:
        log = Path(folder) / "studio.log"
        studio = start_studio(Path(folder) / "outputs", log, timeout_s=args.timeout_s)
        try:
            written = shoot(studio.url, args.images, args.width, args.full_page)
        finally:
            stop_studio(studio)
    for path in written:
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
