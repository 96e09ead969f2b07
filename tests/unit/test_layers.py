"""The layers: the back end never imports the page, the gateway, the commands or gradio, at any level (a lazy import
inside a function counts too), so that `generate`, `bench` and a Space's build run it without the UI."""

from __future__ import annotations

import ast
from pathlib import Path

import studio

BACKEND = Path(studio.__file__).parent / "backend"
FORBIDDEN = ("gradio", "studio.ui", "studio.gateway", "studio.cli")


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


# What the page may import of the studio beside the face and its own modules: the ground floor, which holds no back end.
PAGE_GROUND = {"studio.config", "studio.tiers", "studio.protocol", "studio.grammar", "studio.csv_cells"}
GATEWAY = Path(studio.__file__).parent / "gateway"


def test_the_page_imports_nothing_of_the_studio_around_the_face():
    """No module of the page reaches the back end through a module beside it (as the doctor once did); the gateway,
    beside the page above the face, is the page's to mount."""
    graph = import_graph()
    around = {
        name: sorted(
            found
            for found in imported
            if not found.startswith(("studio.ui", "studio.gateway")) and found not in {FACE, *PAGE_GROUND}
        )
        for name, imported in graph.items()
        if name.startswith("studio.ui.")
    }
    assert len(around) > 20
    assert {name: found for name, found in around.items() if found} == {}


def test_the_gateway_stands_beside_the_page_above_the_face():
    """The gateway reaches the back end through the face alone, imports nothing of the page, the commands or
    gradio, and nothing of the studio beside the ground floor."""
    graph = import_graph()
    gateway = {name: imported for name, imported in graph.items() if name.startswith("studio.gateway")}
    assert len(gateway) >= 7
    beyond = {
        name: sorted(
            found for found in imported if not found.startswith("studio.gateway") and found not in {FACE, *PAGE_GROUND}
        )
        for name, imported in gateway.items()
    }
    assert {name: found for name, found in beyond.items() if found} == {}
    gradio = {
        str(path.relative_to(GATEWAY)): [
            name for name in imported_names(path.read_text(encoding="utf-8")) if name.split(".")[0] == "gradio"
        ]
        for path in sorted(GATEWAY.glob("*.py"))
    }
    assert {path: names for path, names in gradio.items() if names} == {}


def test_the_face_names_only_what_it_imports():
    import studio.backend.face as face

    assert all(hasattr(face, name) for name in face.__all__)


STUDIO = Path(studio.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(STUDIO.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of studio/ and the modules of studio/ it imports: at the top, inside a function, or for types
    alone (under TYPE_CHECKING), each counted; `from package import name` counts the module `name` where it is one."""
    modules = {module_name(path): path for path in STUDIO.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {owner(alias.name) for alias in node.names if alias.name.startswith("studio")}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join([*base, node.module] if node.module else base) if node.level else node.module or ""
                if source.startswith("studio"):
                    found |= {owner(f"{source}.{alias.name}") for alias in node.names}
        graph[name] = {found_name for found_name in found if found_name and found_name != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


# No module reaches itself through its imports, type-only imports counted.
def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 150 and "studio.backend.bench.cells" in graph["studio.backend.bench.runner"]
    assert "studio.backend.servers.launch_spec" in graph["studio.backend.engine_kinds"]  # for types alone: counted
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
