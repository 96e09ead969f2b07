"""The README is a page that reads in two minutes: at most 150 lines, its Space front matter included, and no line
outside its code blocks longer than 200 characters; the reference lives in docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 150
MAX_LINE_CHARS = 200
MAX_SCREENSHOT_BYTES = 300_000


def lines_outside_code_blocks(text: str) -> list[tuple[int, str]]:
    lines, in_block = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            lines.append((number, line))
    return lines


def test_the_readme_has_at_most_150_lines():
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines; move reference material to docs/"


def test_no_readme_line_outside_code_blocks_is_over_200_characters():
    long = [
        f"line {number}: {len(line)} characters"
        for number, line in lines_outside_code_blocks(README.read_text(encoding="utf-8"))
        if len(line) > MAX_LINE_CHARS
    ]
    assert long == []


def test_the_readme_keeps_its_two_commands_and_shows_the_page():
    text = README.read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text
    screenshot = ROOT / "docs" / "images" / "studio.png"
    assert "(docs/images/studio.png)" in text
    assert screenshot.read_bytes().startswith(b"\x89PNG") and screenshot.stat().st_size < MAX_SCREENSHOT_BYTES


def test_the_line_counter_skips_code_blocks():
    text = "a\n```bash\n" + "x" * 300 + "\n```\nb\n"
    assert lines_outside_code_blocks(text) == [(1, "a"), (5, "b")]
