"""The README's Layout table and docs/ARCHITECTURE.md name the modules as the tree has them: every module of the
back end, the engine and the page is in the Layout table, and every module either document names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUDIO = ROOT / "studio"


def layout_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Layout")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else None]


def modules_under(folder: str) -> set[str]:
    return {p.stem for p in (STUDIO / folder).rglob("*.py") if p.stem not in ("__init__", "__main__")}


def test_every_module_is_in_the_layout_table():
    named = set(re.findall(r"`([a-z_0-9]+)`", layout_section()))
    missing = {folder: sorted(modules_under(folder) - named) for folder in ("backend", "engine", "ui")}
    assert {folder: names for folder, names in missing.items() if names} == {}


def test_every_path_the_documents_name_exists():
    texts = layout_section() + (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:studio|tests|benchmarks|docs)/[\w/.]+)`", texts))
    paths |= {f"studio/{p}" for p in re.findall(r"`((?:backend|engine|ui)/[\w/.]+)`", texts)}
    assert len(paths) > 10
    gone = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists() and not (ROOT / f"{p}.py").exists())
    assert gone == []
