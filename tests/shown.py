"""What a person reads of the page's Markdown: its backslash escapes dropped and its entities decoded (the page
escapes every visitor's or server's text, studio/ui/markdown.py), so that tests can look for the words themselves."""

from __future__ import annotations

import html
import re

_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")  # CommonMark: a backslash before ASCII punctuation


def as_shown(markdown: str) -> str:
    return html.unescape(_ESCAPED.sub(r"\1", markdown))
