"""Text the page shows inside Markdown, shown as typed and never run: a visitor's prompt, name or error (and what a
server said) can hold Markdown as well as HTML, and an image `![t](http://host/x.png)` would be fetched by the
browser of whoever opens it (an operator's), a link `[sign in again](http://…)` would be one to click.

Every character that makes markup where it stands is escaped with a backslash (CommonMark lets any ASCII
punctuation be escaped, and an escaped character is only text), so that no link, image, emphasis, code, heading,
list, quote, HTML tag, entity, bare URL or LaTeX is left to make (with its brackets escaped, a `(` or `!` starts
no link or image, and is kept as typed):
- wherever it stands: \\ ` * ~ [ ] < > & $ # + @ (and a bar, written as its entity, so that the text can
  also sit in a cell of a Markdown table, where a bare one ends the cell);
- `_` unless inside a word (`max_run_requests` is no emphasis);
- `-`, `=` and a number's `.` where they start a line (a list, a heading's underline);
- the `:` of `://` and the `.` of `www.` (the bare URLs GitHub's Markdown links by itself).
Other punctuation means nothing to Markdown and is kept as typed, so that a refusal still reads (and searches) as
written: `--max-run-requests`, `it's`, `1.5 s`.

Inside a code span nothing is escaped (a backslash would show): a value shown as code goes through `markdown_code`.
"""

from __future__ import annotations

import re
import textwrap

_MARKUP = re.compile(
    r"[\\`*~\[\]<>&$#+@|]"  # markup wherever it stands
    r"|(?<![^\W_])_|_(?![^\W_])"  # an underscore not inside a word
    r"|:(?=//)|(?i:(?<=www))\."  # a bare URL's
)
_LINE_START = re.compile(r"^([ \t]*)(?:([-=])|(\d+)\.)", re.MULTILINE)  # a list item, a heading's underline
_BACKTICKS = re.compile(r"`+")


def _escaped(match: re.Match[str]) -> str:
    return "&#124;" if match.group(0) == "|" else "\\" + match.group(0)


def _line_start(match: re.Match[str]) -> str:
    lead, mark, number = match.groups()
    return f"{lead}\\{mark}" if mark else f"{lead}{number}\\."


def markdown_text(value: object) -> str:
    """`value` as plain text inside Markdown."""
    text = str(value).replace("\r\n", "\n").replace("\r", "\n")
    return _LINE_START.sub(_line_start, _MARKUP.sub(_escaped, text))


def markdown_code(value: object) -> str:
    """`value` as a code span, on one line: fenced by more backticks than it holds in a row (so that none of its own
    ends the span), with a space inside each fence (taken off again by the renderer)."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def clipped(text: str, width: int) -> str:
    """`text` in at most `width` characters for a caption or a cell: cut at a word's end, with an ellipsis where it
    was cut (a single word longer than `width` is cut inside it)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    shortened = textwrap.shorten(flat, width, placeholder=" …")
    return shortened if shortened != "…" and len(shortened) > 2 else flat[: width - 1] + "…"
