"""A visitor's text inside the page's Markdown is plain text (markdown.py), and a CSV the studio writes holds no
formula (csv_cells.py). Rendered here with markdown-it (CommonMark, with GitHub's tables and strikethrough); the
page's own renderer, with its bare-URL links, is checked in tests/browser/test_visitor_text_page.py."""

from __future__ import annotations

import csv
import html
import io
import re

import pytest
from markdown_it import MarkdownIt

from studio.csv_cells import csv_cell, write_csv_rows
from studio.ui.markdown import markdown_code, markdown_text

RENDER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
HOSTILE = [
    "![t](http://127.0.0.1:9/x.png)",
    "[sign in again](http://127.0.0.1:9/login)",
    "<http://127.0.0.1:9/auto> <img src=x onerror=alert(1)> <b>bold</b>",
    "[x]: http://127.0.0.1:9/ref.png\n\n![y][x]",
    "*em* _em_ __strong__ `code` ~~gone~~ $$x^2$$ \\*still\\*",
    "# heading\n- item\n+ item\n* item\n1. one\n2) two\n> quote\n===\n---\n```\nfenced",
    "a|b\n|---|---|\n|c|d|",
    '&lt;b&gt; &amp; &#124; it\'s "quoted"',
]
MARKUP_TAGS = re.compile(r"<(?!/?p>|br ?/?>)[^>]*>")


def rendered_text(markdown: str) -> tuple[str, str]:
    """The HTML a renderer makes of `markdown`, and the text a reader sees in it."""
    made = RENDER.render(markdown)
    return made, " ".join(html.unescape(re.sub(r"<[^>]+>", " ", made)).split())


@pytest.mark.parametrize("text", HOSTILE)
def test_a_visitors_text_is_shown_as_typed_with_no_markup(text):
    made, seen = rendered_text(markdown_text(text))
    assert MARKUP_TAGS.findall(made) == []  # paragraphs and line breaks only: no image, link, emphasis, heading, ...
    assert seen == " ".join(text.split())


def test_bare_urls_and_addresses_are_not_left_for_a_renderer_to_link():
    escaped = markdown_text("see http://evil.example/x, www.evil.example and a@evil.example")
    assert "http://" not in escaped and "www." not in escaped and "a@" not in escaped


def test_a_visitors_text_in_a_table_cell_stays_in_its_cell():
    made, _ = rendered_text(f"| prompt | seed |\n|---|---|\n| {markdown_text('a | b ![t](http://h/x.png)')} | 7 |")
    assert made.count("<td>") == 2 and "<img" not in made and "a | b ![t](http://h/x.png)" in html.unescape(made)


def test_words_of_refusals_read_as_written():
    assert markdown_text("set max_run_requests with --max-run-requests: 1.5 s, it's") == (
        "set max_run_requests with --max-run-requests: 1.5 s, it's"
    )


@pytest.mark.parametrize("value", ["video_gen_1", "a`b``c", "`edge`", "x\ny"])
def test_a_code_span_holds_its_value_whole(value):
    made, seen = rendered_text(f"job {markdown_code(value)}")
    assert made.count("<code>") == 1 and seen == "job " + " ".join(value.splitlines())


def test_csv_cells_that_a_spreadsheet_would_run_are_text():
    rows = [
        {"prompt": '=HYPERLINK("http://evil.example","open")', "seed": 1, "latency_s": -0.5},
        {"prompt": "+1+1", "seed": 2, "latency_s": 1.0},
        {"prompt": "-2+3", "seed": 3, "latency_s": None},
        {"prompt": "@SUM(A1)", "seed": 4, "latency_s": None},
        {"prompt": "\t=1", "seed": 5, "latency_s": None},
        {"prompt": "\r=1", "seed": 6, "latency_s": None},
        {"prompt": "a cat = a dog", "seed": 7, "latency_s": None},
    ]
    buffer = io.StringIO()
    write_csv_rows(buffer, ["prompt", "seed", "latency_s"], rows)
    read = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    assert [row["prompt"] for row in read] == ["'" + row["prompt"] for row in rows[:6]] + ["a cat = a dog"]
    assert read[0]["latency_s"] == "-0.5"  # a number stays a number
    assert csv_cell(-3) == -3 and csv_cell(None) is None
