"""Text the page shows inside Markdown: its markup escaped, so a prompt or an error is shown and never run; quotes
kept as typed (an escaped quote would read as `&#x27;` once Gradio's Markdown escapes it again)."""

from __future__ import annotations

import html


def markdown_text(value: object) -> str:
    return html.escape(str(value), quote=False)
