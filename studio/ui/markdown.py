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

Settings and reports are shown as readable lists (label: value, a Markdown table of two columns), never raw JSON:
`markdown_pairs`, `markdown_report`.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Mapping

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


# ---- Readable lists --------------------------------------------------------------------------------
Value = object
MISSING = "–"


def label_of(key: object) -> str:
    """A field's name in words: `num_frames` reads "num frames"."""
    return str(key).replace("_", " ").strip()


def value_text(value: Value) -> str:
    """A value as a cell shows it: yes/no for a flag, a dash for none, a list joined by commas; anything nested as
    compact JSON in a code span."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)) and all(not isinstance(item, (dict, list, tuple)) for item in value):
        return markdown_text(", ".join(str(item) for item in value)) if value else MISSING
    if isinstance(value, (dict, list, tuple)):
        return markdown_code(json.dumps(value, separators=(", ", ": "), default=str)) if value else MISSING
    return markdown_text(value)


def markdown_pairs(pairs: Iterable[tuple[str, Value]], header: tuple[str, str] = ("setting", "value")) -> str:
    """(label, value) pairs as a two-column Markdown table, one a row under `header`: labels and values are text
    (each escaped), never markup. Empty where there are none."""
    rows = [f"| {markdown_text(label)} | {value_text(value)} |" for label, value in pairs]
    head = f"| {markdown_text(header[0])} | {markdown_text(header[1])} |"
    return "\n".join([head, "|:--|:--|", *rows]) if rows else ""


def flat_pairs(data: Mapping[str, Value], labels: Mapping[str, str] | None = None) -> list[tuple[str, Value]]:
    """A mapping's items as (label, value) pairs, a nested mapping's (or a list of mappings') items under its label
    ("nvidia · gpus 0 · name"); `labels` names keys whose words differ from their names."""
    labels = labels or {}
    pairs: list[tuple[str, Value]] = []
    for key, value in data.items():
        label = labels.get(str(key), label_of(key))
        if isinstance(value, Mapping) and value:
            pairs += [(f"{label} · {inner}", item) for inner, item in flat_pairs(value, labels)]
        elif isinstance(value, (list, tuple)) and value and all(isinstance(item, Mapping) for item in value):
            for index, item in enumerate(value):
                pairs += [(f"{label} {index} · {inner}", part) for inner, part in flat_pairs(item, labels)]
        else:
            pairs.append((label, value))
    return pairs


def markdown_report(
    report: Mapping[str, Value], labels: Mapping[str, str] | None = None, header: tuple[str, str] = ("item", "value")
) -> str:
    """A nested report (a dict of values and dicts) as readable lists: its plain values in one table, then each
    nested part under its name in a table of its own."""
    labels = labels or {}
    plain = [(key, value) for key, value in report.items() if not isinstance(value, Mapping) or not value]
    parts = [markdown_pairs(flat_pairs(dict(plain), labels), header)] if plain else []
    for key, value in report.items():
        if isinstance(value, Mapping) and value:
            name = labels.get(str(key), label_of(key))
            parts.append(f"**{markdown_text(name)}**\n\n{markdown_pairs(flat_pairs(value, labels), header)}")
    return "\n\n".join(parts)
