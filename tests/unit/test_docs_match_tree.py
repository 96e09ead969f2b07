"""docs/ARCHITECTURE.md's Layout names the modules as the tree has them: every module of the back end, the engine and
the page is in it, and every module or path that the README or a docs page names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUDIO = ROOT / "studio"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
# The documents whose paths must exist: the README and every docs page.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def layout_section() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def modules_under(folder: str) -> set[str]:
    return {p.stem for p in (STUDIO / folder).rglob("*.py") if p.stem not in ("__init__", "__main__")}


def test_every_module_is_in_the_layout_table():
    named = set(re.findall(r"`([a-z_0-9]+)`", layout_section()))
    missing = {folder: sorted(modules_under(folder) - named) for folder in ("backend", "engine", "ui", "gateway")}
    assert {folder: names for folder, names in missing.items() if names} == {}


def test_every_path_the_documents_name_exists():
    texts = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    paths = set(re.findall(r"`((?:studio|tests|benchmarks|docs|scripts|assets)/[\w/.]+)`", texts))
    paths |= {f"studio/{p}" for p in re.findall(r"`((?:backend|engine|ui|gateway)/[\w/.]+)`", texts)}
    paths = {p for p in paths if not p.endswith("...")}  # `studio/files/...` is the studio's file route, not a path
    assert len(paths) > 10
    gone = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists() and not (ROOT / f"{p}.py").exists())
    assert gone == []


def test_every_link_between_the_documents_resolves():
    """A relative link in the README or a docs page names a file that exists (the README's pages and screenshot)."""
    broken = []
    for document in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text(encoding="utf-8")):
            if "://" not in target and not (document.parent / target).exists():
                broken.append(f"{document.relative_to(ROOT)}: {target}")
    assert broken == []
