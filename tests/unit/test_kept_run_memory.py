"""A run the page keeps after it ended holds only what it needs: not the HTTP request and connection of the page
event that made it (its tasks run in a context of their own), and not one entry per change for a reader who never
came."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore

NOWHERE = "http://127.0.0.1:9"  # nothing listens: the run's requests wait for a server until cancelled
PAGE_REQUEST: contextvars.ContextVar[object] = contextvars.ContextVar("page_request")


class PageRequest:
    """Stands for what a page event's context holds (Gradio keeps its request there)."""


def spec(prompts: int) -> RunSpec:
    return RunSpec(prompts=[f"p{i}" for i in range(prompts)], tier="256p", aspect="1:1", frames=5, steps=2)


async def ended_run(tmp_path, prompts: int) -> tuple[Run, weakref.ref]:
    """A run made and started where a page request is in the context, then cancelled; kept by a board."""
    request = PageRequest()
    PAGE_REQUEST.set(request)
    run = Run(spec(prompts), EndpointPool.from_urls([NOWHERE], poll_interval_s=0.05), OutputStore(tmp_path / "out"))
    RequestBoard().add_run(run)
    run.start()
    await asyncio.sleep(0.05)  # under way: its requests wait for the server
    run.cancel_all()
    await run.wait()
    PAGE_REQUEST.set(None)
    return run, weakref.ref(request)


def test_an_ended_run_does_not_keep_the_page_request_that_made_it(tmp_path):
    async def scenario() -> bool:
        # In a task of its own, as a page event runs: its context is what the run must not keep.
        run, request = await asyncio.create_task(ended_run(tmp_path, 3))
        gc.collect()
        return run.finished and request() is None

    assert asyncio.run(scenario())


def test_an_ended_run_nobody_followed_keeps_no_changes(tmp_path):
    async def scenario() -> list[object]:
        run, _ = await asyncio.create_task(ended_run(tmp_path, 50))
        return [view async for view in run.updates()]

    assert asyncio.run(scenario()) == []
