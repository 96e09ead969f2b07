"""Handlers of the page: a few lines each, over StudioController."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from studio.backend.controller import StudioController
from studio.backend.runner import RequestState, RequestView, RunSpec
from studio.tiers import TierError


def describe_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in exc.errors())
    return str(exc)


def progress_text(view: RequestView) -> str:
    state = {RequestState.QUEUED: "queued at the server", RequestState.WAITING: "waiting"}.get(
        view.state, str(view.state)
    )
    eta = f", about {view.eta_s:.0f} s left" if view.eta_s is not None else ""
    return f"**{state}** · {view.progress:.0f}% · {view.elapsed_s:.1f} s{eta}"


def result_text(view: RequestView) -> str:
    t = view.timings
    if view.state is RequestState.DONE:
        return (
            f"**done** in {t.latency_s:.2f} s · queue {t.queue_wait_s or 0:.2f} s · "
            f"inference {t.inference_s or 0:.2f} s · seed {view.request.seed} · "
            f"{view.request.size}, {view.request.num_frames} frames"
        )
    if view.guardrail_blocked:
        return f"**blocked by guardrails**: {html.escape(view.error or '')}"
    return f"**{view.state}**: {html.escape(view.error or 'no reason given')}"


async def generate_one(
    controller: StudioController,
    prompt: str,
    tier: str,
    aspect: str,
    guardrails: bool,
    steps: int | None = None,
    frames: int | None = None,
) -> AsyncIterator[tuple[Any, str]]:
    """Yields (video path or None, status markdown) as the request moves."""
    try:
        spec = RunSpec(
            prompts=[prompt or ""],
            tier=tier,
            aspect=aspect,
            guardrails=guardrails,
            steps=steps,
            frames=controller.default_frames(tier) if frames is None else frames,
        )
        spec.shape()
        if controller.starting:
            yield None, f"**waiting for the engine**: {html.escape(controller.engine_summary())}"
            await controller.wait_until_ready()
        run = controller.new_run(spec)
    except (ValidationError, TierError, RuntimeError) as exc:
        yield None, f"**cannot generate**: {html.escape(describe_error(exc))}"
        return
    view = run.views[0]
    async for update in run.updates():
        if not update.state.finished:
            yield None, progress_text(update)
    yield (str(view.video_path) if view.state is RequestState.DONE else None), result_text(view)
