"""The embedded engine's imports, read from its source: no module of studio/engine imports another that imports it
back (top-level and function-level imports alike; those under `if TYPE_CHECKING:` do not count), and the engine
never reaches up into the CLI or the UI, nor into gradio."""

from __future__ import annotations

import ast
from pathlib import Path

import studio

STUDIO_DIR = Path(studio.__file__).parent
FORBIDDEN = ("studio.cli", "studio.ui", "gradio")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(STUDIO_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module `module` imports, run-time imports only: `import a.b`, `from a import b` (as a.b and a),
    relative imports resolved."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # `from a import b`: the module a.b where b is one, else a itself. A package the importer lies in is
            # imported before it anyway, and is no edge of its own.
            if not module.startswith(source + "."):
                names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _engine_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between engine modules, every name each engine module imports)."""
    paths = sorted((STUDIO_DIR / "engine").rglob("*.py"))
    modules = {_module_name(path): path for path in paths}
    imports = {
        name: _imported_names(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py")
        for name, path in modules.items()
    }
    edges = {name: {other for other in found if other in modules and other != name} for name, found in imports.items()}
    return edges, imports


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return components


def test_the_graph_sees_the_engine():
    edges, imports = _engine_graph()
    assert "studio.engine.jobs" in edges["studio.engine.serving"]  # top-level
    assert "studio.engine.serve" in edges["studio.engine.__main__"]  # inside a function
    assert "studio.engine.gpu.kernels" in edges["studio.engine.gpu.gpu_setup"]  # `from package import module`
    assert "studio.engine.generator" not in edges["studio.engine.warmup"]  # under TYPE_CHECKING only
    assert "studio.protocol" in imports["studio.engine.api"]


def test_the_engine_has_no_import_cycle():
    edges, _ = _engine_graph()
    assert _cycles(edges) == []


def test_the_engine_never_imports_the_cli_the_ui_or_gradio():
    _, imports = _engine_graph()
    found = {
        module: sorted(name for name in names if any(name == f or name.startswith(f + ".") for f in FORBIDDEN))
        for module, names in imports.items()
    }
    assert {module: names for module, names in found.items() if names} == {}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
