"""The page as a new user's browser lays it out, at a laptop's width (1440 px) and a small one's (1024 px), after
one small run and one small bench: every table fits its box and wraps between words, never inside one; gallery
tiles keep their picture's shape; the player stays within the window; the header and the form stay compact."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.test_studio_page import fill_form
from tests.studio_process import run_small_bench

WIDTHS = (1440, 1024)
HEIGHT = 900
SHORT_WINDOW = 300  # shorter than a 256p 9:16 video
SHAPE_TOLERANCE = 0.05
STUDIO_BLUE = "rgb(58, 124, 165)"  # page.STUDIO_BLUE's 500, the plots' inference blue

# Every visible dataframe: does its table fit its scroll box, and does any cell's text stick out of its cell or
# break inside a word (Gradio's own wrap breaks words anywhere)?
TABLES = """
() => [...document.querySelectorAll('.table-wrap')].filter(t => t.offsetParent !== null).map(table => {
  const box = table.querySelector('.virtual-table-viewport');
  const owner = table.closest('[id]');
  const cells = [...table.querySelectorAll('th.header-cell span.text, .virtual-body span.text')];
  const broken = cells.filter(span => {
    const style = getComputedStyle(span);
    const breaks = style.wordBreak === 'break-all' || style.wordBreak === 'break-word'
      || style.overflowWrap === 'anywhere' || style.overflowWrap === 'break-word';
    return breaks || span.scrollWidth > span.clientWidth + 1;
  }).map(span => span.textContent.trim());
  const columns = [...table.querySelectorAll('th.header-cell')].map(
    th => th.textContent.trim() + ': ' + Math.round(th.getBoundingClientRect().width));
  return {id: owner ? owner.id : '', width: box.clientWidth, content: box.scrollWidth, broken, columns};
})
"""
FITTED = """
() => [...document.querySelectorAll('.table-wrap')].filter(t => t.offsetParent !== null).every(t => {
  const box = t.querySelector('.virtual-table-viewport'); return box.scrollWidth <= box.clientWidth + 1; })
"""
# Each column of a table, as shown: the text of its cells (the rows Gradio has drawn).
COLUMNS = """
(id) => {
  const rows = [...document.querySelectorAll('#' + id + ' .virtual-body .virtual-row')];
  const columns = [];
  for (const row of rows) {
    [...row.querySelectorAll('.body-cell')].forEach((cell, index) => {
      (columns[index] = columns[index] || []).push(cell.innerText.trim());
    });
  }
  return columns;
}
"""
# The gallery's tiles: each picture's shape as drawn and as made, and how it is fitted in its box.
TILES = """
(id) => [...document.querySelectorAll('#' + id + ' .thumbnail-item > img, #' + id + ' .thumbnail-item > video')]
  .map(media => {
    const box = media.getBoundingClientRect();
    const natural = media.tagName === 'VIDEO' ? [media.videoWidth, media.videoHeight]
                                              : [media.naturalWidth, media.naturalHeight];
    return {drawn: box.width / box.height, made: natural[0] / natural[1], fit: getComputedStyle(media).objectFit};
  })
"""
TILES_LOADED = """
(id) => { const media = [...document.querySelectorAll('#' + id + ' .thumbnail-item > img')];
          return media.length > 0 && media.every(m => m.complete && m.naturalWidth > 0); }
"""
# Where each option of a choice sits: one line holds them all when every top is the same.
OPTION_TOPS = (
    "(id) => [...document.querySelectorAll('#' + id + ' label')].map(l => Math.round(l.getBoundingClientRect().top))"
)
LABEL_LINES = "(id) => document.querySelector('#' + id + ' [data-testid=block-info]').getClientRects().length"
NUMBER = re.compile(r"-?\d+(?:\.(\d+))?")


@pytest.fixture(scope="module")
def page(browser, studio_app) -> Iterator[Page]:
    """The studio's page after one run of two tall videos at 256p (the harder shape for tiles and the player)
    and a bench of two cells (a lone request does not queue: its queue wait is a round 0 beside the other's), as
    the loopback operator (every tab shown)."""
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": HEIGHT})
    page.goto(studio_app.url)
    page.locator("#engine-status").get_by_text("ready at").wait_for(timeout=120_000)
    fill_form(page, "a layout check", frames=5, steps=2, copies=2, concurrency=2)
    page.locator("#aspect input").click()
    page.get_by_role("option", name="9:16").click()
    page.locator("#generate").click()
    expect(page.locator("#status")).to_contain_text("finished: 2 done", timeout=240_000)
    page.locator("#gallery .thumbnail-item").nth(1).wait_for(timeout=30_000)

    run_small_bench(page)
    page.get_by_role("tab", name="Generate").click()
    yield page
    page.close()


def open_tab(page: Page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    if name == "History":
        # The newest run is the bench's: the page's own run is the one with the layout check's prompt.
        page.locator("#history").get_by_text("a layout check").last.click()
        expect(page.locator("#history-requests")).to_contain_text("done", timeout=30_000)
        page.wait_for_function(TILES_LOADED, arg="history-gallery", timeout=30_000)
    elif name == "Bench":
        expect(page.locator("#bench-summary")).to_contain_text("256p", timeout=30_000)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_fits_its_box_and_wraps_whole_words(page, width):
    page.set_viewport_size({"width": width, "height": HEIGHT})
    seen = set()
    for tab in ("Generate", "History", "Server", "Bench"):
        open_tab(page, tab)
        # Gradio measures the columns again once the tab is drawn at this width; past the bound, the checks below
        # say what does not fit.
        with contextlib.suppress(PlaywrightTimeoutError):
            page.wait_for_function(FITTED, timeout=10_000)
        for table in page.evaluate(TABLES):
            seen.add(table["id"])
            assert table["content"] <= table["width"] + 1, f"{tab}: {table['id']} is wider than its box: {table}"
            assert not table["broken"], f"{tab}: {table['id']} at {width} px cuts or breaks words: {table['broken']}"
    assert {"requests", "stats-table", "history", "history-requests", "server-metrics", "bench-summary"} <= seen


def test_numeric_columns_read_in_one_format(page):
    """A column of numbers gives them all the same decimals ("0.70" beside "0.31", not "0.7"): the run's
    requests and the bench's cells."""
    for tab, table in (("History", "history-requests"), ("Bench", "bench-summary")):
        open_tab(page, tab)
        numeric = 0
        for column in page.evaluate(COLUMNS, table):
            shown = [text for text in column if text]
            if not shown or not all(NUMBER.fullmatch(text) for text in shown):
                continue
            numeric += 1
            decimals = {len(NUMBER.fullmatch(text).group(1) or "") for text in shown}
            assert len(decimals) == 1, f"{table}: a column mixes formats: {shown}"
        assert numeric >= 3, f"{table}: too few numeric columns seen to tell"


@pytest.mark.parametrize("width", WIDTHS)
def test_gallery_tiles_keep_their_pictures_shape(page, width):
    page.set_viewport_size({"width": width, "height": HEIGHT})
    for tab, gallery in (("Generate", "gallery"), ("History", "history-gallery"), ("Bench", "bench-plots")):
        open_tab(page, tab)
        tiles = page.locator(f"#{gallery} .thumbnail-item")
        for index in range(tiles.count()):  # Gradio loads a tile's picture once it is scrolled near
            tiles.nth(index).scroll_into_view_if_needed()
        page.wait_for_function(TILES_LOADED, arg=gallery, timeout=30_000)
        drawn = page.evaluate(TILES, gallery)
        assert drawn, f"{gallery}: no tiles"
        for tile in drawn:
            assert tile["fit"] == "contain", f"{gallery}: a tile is cropped or stretched to its box: {tile}"
            assert abs(tile["drawn"] / tile["made"] - 1) <= SHAPE_TOLERANCE, f"{gallery}: a tile lost its shape: {tile}"
    # The plots open as tiles, none zoomed into at first.
    assert page.locator("#bench-plots .preview").count() == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_the_player_stays_within_the_window(page, width):
    """The tall video plays whole, in its shape, in a window shorter than the video (320 px tall)."""
    open_tab(page, "Generate")
    page.set_viewport_size({"width": width, "height": SHORT_WINDOW})
    page.locator("#gallery .thumbnail-item").first.click()
    page.wait_for_function(
        "() => { const v = document.querySelector('#video video'); return v && v.readyState >= 2; }", timeout=30_000
    )
    box = page.evaluate(
        "() => { const v = document.querySelector('#video video'); const r = v.getBoundingClientRect();"
        " return {height: r.height, drawn: r.width / r.height, made: v.videoWidth / v.videoHeight,"
        " window: innerHeight, natural: v.videoHeight}; }"
    )
    assert box["natural"] > box["window"], f"the video is not taller than the window: the check tells nothing: {box}"
    assert box["height"] <= box["window"], f"the player is taller than the window: {box}"
    assert abs(box["drawn"] / box["made"] - 1) <= SHAPE_TOLERANCE, f"the player lost the video's shape: {box}"
    page.set_viewport_size({"width": width, "height": HEIGHT})


@pytest.mark.parametrize("width", WIDTHS)
def test_header_and_form_stay_compact(page, width):
    page.set_viewport_size({"width": width, "height": HEIGHT})
    open_tab(page, "Generate")
    # The loopback operator is the only one: no mine/everyone switch, and no blank band under the title.
    expect(page.locator("#show")).to_be_hidden()
    header = page.locator("#header").bounding_box()
    assert header is not None and header["height"] <= 70, f"the header is {header} px tall"
    # Each choice on one line; the slider's label too.
    for choice in ("tier", "fps", "seed-policy"):
        tops = page.evaluate(OPTION_TOPS, choice)
        assert len(tops) >= 3 and len(set(tops)) == 1, f"#{choice}'s options wrap at {width} px: tops {tops}"
    assert page.evaluate(LABEL_LINES, "concurrency") == 1, f"the concurrency label wraps at {width} px"
    # What every run names, and the button that sends it, in view as the page opens (the rest below it).
    page.evaluate("window.scrollTo(0, 0)")
    for field in ("prompt", "tier", "aspect", "generate"):
        box = page.locator(f"#{field}").bounding_box()
        assert box is not None and box["y"] + box["height"] <= HEIGHT, f"#{field} is below the fold: {box}"


def test_one_filled_action_in_the_studio_colours(page):
    """Generate is the tab's one filled button, in the page's blue; Cancel all is outlined."""
    open_tab(page, "Generate")
    assert page.locator("#generate").evaluate("b => getComputedStyle(b).backgroundColor") == STUDIO_BLUE
    filled = page.evaluate(
        "() => [...document.querySelectorAll('button')].filter(b => b.offsetParent !== null)"
        ".filter(b => { const c = getComputedStyle(b).backgroundColor;"
        " const m = c.match(/\\d+/g).map(Number); return (m.length < 4 || m[3] > 0) && Math.max(...m.slice(0, 3))"
        " - Math.min(...m.slice(0, 3)) > 60; }).map(b => b.id || b.innerText)"
    )
    assert filled == ["generate"], f"filled, coloured buttons on the Generate tab: {filled}"


def test_results_sit_beside_the_form_at_a_laptops_width(page):
    """At 1440 px the form is a column on the left and the results (status, tiles, player) one on the right, as in
    other studios' pages; the form's first fields and its button stay in view as the page opens."""
    page.set_viewport_size({"width": WIDTHS[0], "height": HEIGHT})
    open_tab(page, "Generate")
    page.evaluate("window.scrollTo(0, 0)")
    form, results = (page.locator(f"#generate-{part}").bounding_box() for part in ("form", "results"))
    assert form is not None and results is not None
    assert results["x"] >= form["x"] + form["width"] - 1, f"the results are not beside the form: {form} {results}"
    assert abs(results["y"] - form["y"]) <= 2, f"the two columns do not start on one line: {form} {results}"
    for part in ("status", "gallery", "video"):
        box = page.locator(f"#{part}").bounding_box()
        assert box is not None and box["x"] >= results["x"] - 1, f"#{part} is not in the results' column: {box}"
    for field in ("prompt", "tier", "aspect", "generate"):
        box = page.locator(f"#{field}").bounding_box()
        assert box is not None and box["x"] < results["x"], f"#{field} is not in the form's column: {box}"
        assert box["y"] + box["height"] <= HEIGHT, f"#{field} is below the fold: {box}"
    # The request a row names is said in words; no box of ids to read.
    expect(page.locator("#cancel-id")).to_have_count(0)
    expect(page.locator("#selection")).to_contain_text("Select a request")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_player_is_sized_to_its_video_and_centred(page, width):
    """The selected video fills no more than twice its own width (larger is only blurred), centred in its column;
    in Generate and in History."""
    page.set_viewport_size({"width": width, "height": HEIGHT})
    for tab, player, tile in (("Generate", "video", "#gallery .thumbnail-item"), ("History", "history-video", None)):
        open_tab(page, tab)
        page.locator(tile or "#history-gallery .thumbnail-item").first.click()
        page.wait_for_function(
            f"() => {{ const v = document.querySelector('#{player} video'); return v && v.readyState >= 2; }}",
            timeout=30_000,
        )
        box = page.evaluate(
            f"() => {{ const v = document.querySelector('#{player} video'); const r = v.getBoundingClientRect();"
            f" const c = document.querySelector('#{player}').getBoundingClientRect();"
            " return {width: r.width, natural: v.videoWidth, left: r.left - c.left, right: c.right - r.right,"
            " column: c.width}; }"
        )
        assert box["width"] <= 2 * box["natural"] + 1, f"{tab}: the video is drawn past twice its size: {box}"
        assert box["width"] > box["natural"] - 1 or box["column"] < box["natural"], f"{tab}: drawn small: {box}"
        assert abs(box["left"] - box["right"]) <= 2, f"{tab}: the player is not centred: {box}"
