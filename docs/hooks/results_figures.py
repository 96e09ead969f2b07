"""An mkdocs hook that puts benchmarks/RESULTS.md's "Figures in force" section into the Performance page at build
time, where the page holds the marker below: the figures are kept in one file and the site shows them as they are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
MARKER = "<!-- figures in force: benchmarks/RESULTS.md -->"
HEADING = "## Figures in force"


def figures_in_force() -> str:
    """The section's text under its heading, up to the next second-level heading."""
    text = RESULTS.read_text(encoding="utf-8")
    start = text.index(HEADING) + len(HEADING)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else None].strip()


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, figures_in_force())
