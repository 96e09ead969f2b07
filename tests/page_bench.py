"""The page's Bench view driven from a test: its form for a small layouts bench on the CPU, and a run of it."""

from __future__ import annotations

import asyncio
from typing import Any


def layouts_form(layouts: str) -> dict[str, Any]:
    """The Bench view's form: `layouts` at 256p 1:1, 5 frames, 2 steps, 2 requests at concurrency 2."""
    return {
        "requests": 2,
        "concurrencies": "2",
        "tiers": ["256p"],
        "guardrails": ["on"],
        "aspect": "1:1",
        "frames": 5,
        "steps": 2,
        "warmup": 1,
        "slo_s": 60,
        "layouts": layouts,
        "variants": "",
        "prompts": "",
    }


def run_page_bench(controller: Any, form: dict[str, Any]) -> list[Any]:
    """Every update the Bench view gives for `form`, in order."""
    from studio.ui import bench_view

    async def bench() -> list[Any]:
        return [update async for update in bench_view.run_bench_view(controller, form)]

    return asyncio.run(bench())
