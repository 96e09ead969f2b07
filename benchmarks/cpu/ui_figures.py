"""The page's own figures, measured in headless Chromium against a real studio on the embedded engine.

1. Completion to screen: for each video, from the moment the studio saw its job complete (sidecar
   timings.completed; the studio polls every 0.25 s) to its thumbnail appearing in the page's gallery
   (a MutationObserver in the page stamps Date.now()). Median and max.
2. Refresh cadence with 64 requests in flight: intervals between changes of the request table, median and p90.
3. Studio process CPU while idle: psutil over 20 s, with no page open, and with one page open.

Usage: python benchmarks/cpu/ui_figures.py [--videos 6] [--in-flight 64]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`


from tests.studio_process import CHROMIUM, CHROMIUM_ARGS, open_advanced, start_studio, stop_studio

OBSERVER = """
() => {
  window.__seen = {}; window.__tableChanges = [];
  const stamp = () => {
    document.querySelectorAll('#gallery video, #gallery img').forEach(el => {
      const m = (el.currentSrc || el.src || '').match(/req_[0-9a-f]{12}/);
      if (m && !(m[0] in window.__seen)) window.__seen[m[0]] = Date.now() / 1000;
    });
  };
  new MutationObserver(stamp).observe(document.querySelector('#gallery'), {subtree: true, childList: true, attributes: true});
  new MutationObserver(() => window.__tableChanges.push(performance.now())).observe(
    document.querySelector('#requests'), {subtree: true, childList: true, characterData: true});
}
"""


def fill(page, prompts: str, frames: int, steps: int, copies: int, concurrency: int) -> None:
    page.locator("#prompt textarea").fill(prompts)
    open_advanced(page)
    page.locator("#frames input").fill(str(frames))
    page.locator("#steps input").fill(str(steps))
    page.locator("#copies input").fill(str(copies))
    page.locator("#concurrency input[type=number]").fill(str(concurrency))
    page.locator("#concurrency input[type=number]").press("Enter")


def cpu_percent(process: psutil.Process, seconds: float) -> float:
    procs = [process]  # the studio alone, not its engine
    for p in procs:
        p.cpu_percent(None)
    time.sleep(seconds)
    return sum(p.cpu_percent(None) for p in procs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--videos", type=int, default=6)
    parser.add_argument("--in-flight", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        outputs = Path(tmp) / "outputs"
        studio = start_studio(outputs, Path(tmp) / "studio.log")
        try:
            process = psutil.Process(studio.process.pid)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page()
                page.goto(studio.url)
                page.locator("#engine-status").get_by_text(re.compile(r"\bready\b")).wait_for(timeout=180_000)
                page.evaluate(OBSERVER)
                # 1. completion to screen
                fill(page, "a red circle moving left", frames=9, steps=4, copies=args.videos, concurrency=1)
                page.locator("#generate").click()
                page.locator("#stats").get_by_text(f"{args.videos} completed").wait_for(timeout=600_000)
                time.sleep(2)
                seen = page.evaluate("() => window.__seen")
                delays = []
                for sidecar in outputs.glob("videos/*/*.json"):
                    data = json.loads(sidecar.read_text())
                    if data["request_id"] in seen:
                        delays.append(seen[data["request_id"]] - data["timings"]["completed"])
                # 2. refresh cadence with many in flight
                page.evaluate("() => { window.__tableChanges = []; }")
                fill(page, "a long one", frames=33, steps=200, copies=args.in_flight, concurrency=args.in_flight)
                page.locator("#generate").click()
                page.locator("#status").get_by_text(f"queued {args.in_flight} requests").wait_for(timeout=60_000)
                time.sleep(20)
                changes = page.evaluate("() => window.__tableChanges")
                page.locator("#cancel-all").click()
                page.locator("#stats").get_by_text(f"{args.in_flight} cancelled").wait_for(timeout=120_000)
                # Mutations come in bursts per refresh: group those closer than 100 ms into one refresh.
                refreshes = [changes[0]] if changes else []
                for t in changes[1:]:
                    if t - refreshes[-1] > 100:
                        refreshes.append(t)
                intervals = [(b - a) / 1000 for a, b in itertools.pairwise(refreshes)]
                # 3. idle CPU with the page open, then closed
                time.sleep(5)
                open_cpu = cpu_percent(process, 20)
                page.close()
                browser.close()
            time.sleep(3)
            closed_cpu = cpu_percent(process, 20)
        finally:
            stop_studio(studio)
    print(
        f"completion to screen: median {statistics.median(delays):.2f} s, max {max(delays):.2f} s "
        f"({len(delays)} videos)"
    )
    print(
        f"table refresh with {args.in_flight} in flight: median interval {statistics.median(intervals):.2f} s, "
        f"p90 {statistics.quantiles(intervals, n=10)[-1]:.2f} s, max {max(intervals):.2f} s "
        f"({len(intervals)} refreshes in 20 s)"
    )
    print(f"studio CPU idle: {open_cpu:.1f}% of one core with a page open, {closed_cpu:.1f}% with none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
