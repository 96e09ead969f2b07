"""Tests wait on events, not on time: every polling loop goes through tests/waiting.py, which bounds it and names
what it waited for. A `while` loop that sleeps by itself (time.sleep, asyncio.sleep) anywhere else under tests/
fails here, unless its `while` line says why it is not a poll with a `# not a poll: ...` comment."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
ALLOWED = {TESTS / "waiting.py"}
OPT_OUT = "# not a poll:"
SLEEPING_MODULES = {"time", "asyncio"}


def bare_polls(source: str, filename: str = "<source>") -> list[int]:
    """The lines of the `while` loops in `source` whose own body calls time.sleep or asyncio.sleep (under any
    import alias), leaving out those whose `while` line carries the opt-out comment. Functions and classes defined
    inside a loop's body are their own code, not the loop's."""
    tree = ast.parse(source, filename)
    modules: set[str] = set()  # names bound to the time or asyncio module
    functions: set[str] = set()  # names bound to their sleep
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name in SLEEPING_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in SLEEPING_MODULES:
            functions |= {alias.asname or alias.name for alias in node.names if alias.name == "sleep"}

    def sleeps(call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Attribute):
            return func.attr == "sleep" and isinstance(func.value, ast.Name) and func.value.id in modules
        return isinstance(func, ast.Name) and func.id in functions

    def calls_sleep(nodes: list[ast.stmt]) -> bool:
        pending: list[ast.AST] = list(nodes)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                continue
            if isinstance(node, ast.Call) and sleeps(node):
                return True
            pending.extend(ast.iter_child_nodes(node))
        return False

    lines = source.splitlines()
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.While)
        and calls_sleep([*node.body, *node.orelse])
        and OPT_OUT not in lines[node.lineno - 1]
    )


def test_no_test_polls_by_itself():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if path not in ALLOWED
        for line in bare_polls(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not found, (
        "a while loop that sleeps by itself: wait through tests/waiting.py (wait_for, wait_for_async) with a bound, "
        f"or mark a loop that is no poll with '{OPT_OUT} <why>' on its while line: {', '.join(found)}"
    )


def test_the_guard_finds_sleeping_loops_under_any_alias():
    source = """
import asyncio
import time as clock
from time import sleep
from asyncio import sleep as nap


async def polls(ready):
    while not ready():
        await asyncio.sleep(0.05)
    while not ready():
        clock.sleep(0.05)
    while not ready():
        if ready():
            break
        else:
            sleep(0)
    while not ready():
        await nap(0)
    while not ready():  # not a poll: the pause itself is measured
        await asyncio.sleep(0.5)
"""
    assert bare_polls(source) == [9, 11, 13, 18]


def test_the_guard_leaves_loops_that_do_not_sleep_and_sleeps_outside_loops():
    source = """
import asyncio
import time

from tests.waiting import wait_for


def fine(rows, ready):
    for row in rows:
        time.sleep(0.01)
    time.sleep(0.1)
    while rows:
        rows.pop()
    while not ready():
        def later():
            time.sleep(1)
        ready = later
    while not ready():
        other.sleep(1)
    wait_for(ready, "it", 5)
"""
    assert bare_polls(source) == []
