"""The docs site builds with `mkdocs build --strict` (no broken link between pages, no page left out of the nav), its
CLI reference written from the studio's own parsers and its Performance page holding benchmarks/RESULTS.md's figures
in force."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studio.config import PROJECT_ROOT


def mkdocs_command() -> list[str]:
    """mkdocs from this interpreter's environment; skipped where it is missing, except under CI."""
    try:
        import material  # noqa: F401  (the theme the site names)
        import mkdocs  # noqa: F401
    except ImportError:
        reason = "mkdocs-material is not installed (pip install -e '.[dev]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: the docs site must build under CI")
        pytest.skip(reason)
    return [sys.executable, "-m", "mkdocs"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    command = mkdocs_command()
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [*command, "build", "--strict", "--site-dir", str(out)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    assert "WARNING" not in built.stderr, built.stderr[-3000:]
    yield out
    shutil.rmtree(out, ignore_errors=True)


def text_of(page: Path) -> str:
    return re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))


def test_every_docs_page_is_in_the_site(site):
    for document in sorted((PROJECT_ROOT / "docs").glob("*.md")):
        built = site / "index.html" if document.stem == "index" else site / document.stem / "index.html"
        assert built.exists(), f"{document.name} has no page in the site"


def test_the_cli_reference_names_every_flag_of_every_command(site):
    from studio.cli import build_parser

    reference = text_of(site / "cli-reference" / "index.html")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(commands) == {"ui", "generate", "bench", "plan", "engine", "doctor", "keys"}
    for name, sub in commands.items():
        assert f"omni-studio {name}" in reference
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in reference, f"{flag} of {name} is missing from the CLI reference"


def test_the_performance_page_holds_the_figures_in_force(site):
    results = (PROJECT_ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    start = results.index("## Figures in force")
    section = results[start : results.index("\n## ", start)]
    first_row = next(line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what"))
    first_cell = first_row.split("|")[1].strip()
    page = site / "performance" / "index.html"
    assert first_cell in text_of(page)
    assert "figures in force: benchmarks" not in page.read_text(encoding="utf-8")  # the marker was replaced


def test_the_page_screenshots_are_small_pngs(site):
    for name in ("page-generate.png", "page-history.png", "page-server.png", "page-bench.png"):
        image = PROJECT_ROOT / "docs" / "images" / name
        assert image.read_bytes().startswith(b"\x89PNG") and image.stat().st_size < 400_000
        assert (site / "images" / name).exists()
