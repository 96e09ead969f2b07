"""From opening the page to watching the first video, as a new user meets the studio: a fresh studio on the embedded
engine (the settings `make run` uses), headless Chromium opens its page, writes a prompt, leaves every other field
at its default, presses Generate, picks the finished video and waits until it plays.

Four figures per round, the first from this script's clock, the others from the page's own (performance.now(), from
navigation start):
- command to page ready: from starting the studio's process until its page, opened as soon as it answers, is ready;
- page ready: the Generate button visible and the engine's status "ready";
- generate to playing: the click on Generate until the picked video's <video> has frames to show;
- page load to first video: the two together, with the typing between them (a script's: near zero).

Each round is a new studio (its engine started afresh), as for a person who runs `make run` and opens the URL: the
first figure holds the studio's and its engine's start. Medians over the rounds.

Usage: python benchmarks/cpu/first_video.py [--rounds 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `tests`

from tests.studio_process import CHROMIUM, CHROMIUM_ARGS, start_studio, stop_studio

PROMPT = "a red circle moving left on a white background"
PLAYING = "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }"


def one_round(width: int, height: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="omni-studio-first-video-") as folder:
        began = time.monotonic()
        studio = start_studio(Path(folder) / "outputs", Path(folder) / "studio.log", timeout_s=180)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                try:
                    page = browser.new_page(viewport={"width": width, "height": height})
                    page.goto(studio.url)
                    page.locator("#generate").wait_for(state="visible", timeout=120_000)
                    page.locator("#engine-status").get_by_text(re.compile(r"\bready\b")).wait_for(timeout=180_000)
                    ready_s = page.evaluate("() => performance.now()") / 1000
                    command_to_ready_s = time.monotonic() - began
                    page.locator("#prompt textarea").fill(PROMPT)
                    clicked_s = page.evaluate("() => performance.now()") / 1000
                    page.locator("#generate").click()
                    page.locator("#stats").get_by_text("1 completed").wait_for(timeout=600_000)
                    page.locator("#gallery .thumbnail-item").first.wait_for(timeout=60_000)
                    page.locator("#gallery .thumbnail-item").first.click()
                    page.wait_for_function(PLAYING, timeout=60_000, polling=50)
                    playing_s = page.evaluate("() => performance.now()") / 1000
                finally:
                    browser.close()
        finally:
            stop_studio(studio)
    return {
        "command_to_page_ready_s": round(command_to_ready_s, 2),
        "page_ready_s": round(ready_s, 2),
        "generate_to_playing_s": round(playing_s - clicked_s, 2),
        "page_load_to_first_video_s": round(playing_s, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--out", type=Path, help="where to write the rounds and medians as JSON")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    rounds = []
    for index in range(args.rounds):
        began = time.monotonic()
        rounds.append(one_round(args.width, args.height))
        print(f"round {index + 1}: {rounds[-1]} ({time.monotonic() - began:.0f} s)", flush=True)
    medians = {key: round(statistics.median(r[key] for r in rounds), 2) for key in rounds[0]}
    for key, value in medians.items():
        print(f"{key.removesuffix('_s').replace('_', ' ')}  median {value:.2f} s")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "rounds": rounds, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
