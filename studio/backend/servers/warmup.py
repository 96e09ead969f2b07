"""Waiting for a server's own warm-up to finish: the embedded engine answers once every warm-up size is warm at
batch 1 and warms its larger batch sizes while it serves, saying how far it is in GET /health's `warmup`. A
measurement must not meet those runs (a request that arrives during one waits for it). A server that reports
no warm-up (vLLM-Omni, a Cosmos Framework server) is warm once it answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import httpx

from studio.backend.clients.http import async_client

log = logging.getLogger(__name__)


async def warmup_state(root_url: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The server's warm-up as its /health tells it; None where it tells none or does not answer."""
    url = root_url.rstrip("/").removesuffix("/v1") + "/health"
    try:
        async with async_client(timeout_s) as http:
            body = (await http.get(url)).json()
    except (httpx.HTTPError, ValueError):
        return None
    state = body.get("warmup") if isinstance(body, dict) else None
    return state if isinstance(state, dict) else None


def _done(state: dict[str, Any] | None) -> bool:
    return state is None or bool(state.get("complete")) or bool(state.get("failed"))


async def wait_until_warm(root_urls: Sequence[str], timeout_s: float, poll_s: float = 1.0) -> list[str]:
    """Until every server's warm-up is over (complete, failed, or not reported), at most `timeout_s`; the
    servers still warming then (a measurement goes on without waiting longer)."""
    deadline = time.monotonic() + timeout_s
    waiting = list(root_urls)
    logged = False
    while waiting:
        states = await asyncio.gather(*(warmup_state(url) for url in waiting))
        waiting = [url for url, state in zip(waiting, states, strict=True) if not _done(state)]
        if not waiting or time.monotonic() >= deadline:
            break
        if not logged:
            runs = [
                f"{url}: {state['runs_done']} of {state['runs_total']}"
                for url, state in zip(waiting, states, strict=False)
                if state
            ]
            log.info("waiting for the servers' own warm-up runs: %s", "; ".join(runs))
            logged = True
        await asyncio.sleep(poll_s)
    if waiting:
        log.warning("servers still warming after %.0f s, measured regardless: %s", timeout_s, ", ".join(waiting))
    return waiting


def warmup_note(state: dict[str, Any] | None) -> str | None:
    """How a serving server's own warm-up stands, in a few words; None once it is over (or never reported)."""
    if state is None or state.get("complete"):
        return None
    if state.get("failed"):
        return "a warm-up run failed: its batches stay smaller"
    return f"warming larger batches ({state.get('runs_done', '?')} of {state.get('runs_total', '?')} runs)"
