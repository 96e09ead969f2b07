"""The layers: the back end never imports the page, the commands or gradio, at any level (a lazy import inside a
function counts too), so that `generate`, `bench` and a Space's build run it without the UI."""

from __future__ import annotations

import ast
from pathlib import Path

import studio

BACKEND = Path(studio.__file__).parent / "backend"
FORBIDDEN = ("gradio", "studio.ui", "studio.cli")


def imported_names(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def reaching_up(source: str) -> list[str]:
    return [name for name in imported_names(source) if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]


def test_the_backend_never_imports_the_ui_the_cli_or_gradio():
    found = {
        str(path.relative_to(BACKEND)): reaching_up(path.read_text(encoding="utf-8"))
        for path in sorted(BACKEND.rglob("*.py"))
    }
    assert len(found) > 30  # every module of the back end was read
    assert {path: names for path, names in found.items() if names} == {}


def test_the_scan_sees_a_lazy_import():
    source = "def later():\n    import gradio as gr\n    from studio.ui.page import build_page\n"
    assert reaching_up(source) == ["gradio", "studio.ui.page"]


UI = Path(studio.__file__).parent / "ui"
FACE = "studio.backend.face"


def test_the_page_reaches_the_back_end_through_its_face_alone():
    beyond = {
        str(path.relative_to(UI)): [
            name
            for name in imported_names(path.read_text(encoding="utf-8"))
            if name.startswith("studio.backend") and name != FACE
        ]
        for path in sorted(UI.glob("*.py"))
    }
    assert {path: names for path, names in beyond.items() if names} == {}


def test_the_face_names_only_what_it_imports():
    import studio.backend.face as face

    assert all(hasattr(face, name) for name in face.__all__)
