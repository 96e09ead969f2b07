"""The studio's API for programs (gradio_client and plain HTTP): structured answers, not the page's Markdown.

- `/submit_run`: queue a run (the Generate form's fields); answers the run's record.
- `/run_status`: a run's record now.
- `/wait_run`: the run's record once it has finished, or after at most MAX_WAIT_S (a long-poll: while `finished` is
  false, ask again).
- `/preview`: the latest preview of a request being made (its step and the image as a data URL), where its server
  sends previews (the embedded engine).

A run's record: its id, whether it has finished, how many requests are in each state, and each request with its
state, progress, seed, error, and its video's URL (the studio's file route, for the session of the caller, whose
cookies it takes; operators also get the video's path on the studio's machine). A caller sees only its own runs
(operators: everyone's), as on the page; a refusal is a plain-text error (gr.Error), the same words the page shows.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import gradio as gr

from studio.backend.face import RequestState, Run, StudioController, Visitor, for_visitors
from studio.tiers import DEFAULT_ASPECT, Aspect, Tier
from studio.ui import handlers
from studio.ui.file_links import FileLinks
from studio.ui.identity import PageAccess

WAIT_POLL_S = 0.25
# A wait holds one of the page's workers (Gradio runs at most 40 events at once, for every visitor): it answers
# within this, under the 30 s after which many proxies drop a quiet request, and the caller asks again.
MAX_WAIT_S = 25.0


def run_record(run: Run, links: FileLinks, request: gr.Request | None, operator: bool | None = None) -> dict[str, Any]:
    """A run as a program reads it. A video's path on the studio's machine, and the server's address in an error, are
    for operators (`operator`; None: the run's owner's role, as only operators see an operator's run); anyone else has
    the video's URL."""
    counts = Counter(str(view.state) for view in run.views)
    paths = run.visitor.operator if operator is None else operator
    return {
        "run_id": run.id,
        "finished": run.finished,
        "states": dict(counts),
        "requests": [
            {
                "id": view.id,
                "position": view.position,
                "prompt": view.request.prompt,
                "state": str(view.state),
                "progress": round(view.progress, 1),
                "step": view.step,
                "total_steps": view.total_steps,
                "preview_step": view.preview.step if view.preview is not None else None,
                "seed": view.request.seed,
                "error": view.error if paths else for_visitors(view.error),
                **({"video_path": str(view.video_path) if view.video_path else None} if paths else {}),
                "video_url": links.url(view.video_path, request) if view.video_path else None,
                "sidecar_url": links.url(view.sidecar_path, request) if view.sidecar_path else None,
            }
            for view in run.views
        ],
    }


def _visible_run(controller: StudioController, run_id: str, visitor: Visitor) -> Run | None:
    """The run named, where it is on the board and the visitor may see it; None where it is not on the board."""
    run = next((run for run in controller.board.runs if run.id == (run_id or "").strip()), None)
    if run is not None and not (visitor.operator or run.visitor.id == visitor.id):
        _no_such_run(run_id)
    return run


def _no_such_run(run_id: str) -> NoReturn:
    raise gr.Error(f"no run {str(run_id)[:40]!r} of yours in this studio", print_exception=False)


def history_record(
    controller: StudioController, run_id: str, visitor: Visitor, links: FileLinks, request: gr.Request | None
) -> dict[str, Any]:
    """A run no longer on the board (the board keeps the newest finished runs; an earlier studio's too) as history
    has it, in run_record's shape; the same refusal as for a run that is not the visitor's, or none."""
    rows = controller.store.run_requests((run_id or "").strip(), None if visitor.operator else visitor.id)
    if not rows:
        _no_such_run(run_id)
    states = [RequestState(row["state"]) for row in rows]
    requests = []
    for row, state in zip(rows, states, strict=True):
        video, sidecar = (Path(row[name]) if row[name] else None for name in ("video_path", "sidecar_path"))
        requests.append(
            {
                "id": row["id"],
                "position": row["position"],
                "prompt": row["prompt"],
                "state": str(state),
                "progress": 100.0 if state is RequestState.DONE else 0.0,
                "step": None,
                "total_steps": None,
                "preview_step": None,
                "seed": (row.get("parameters") or {}).get("seed"),
                "error": row["error"] if visitor.operator else for_visitors(row["error"]),
                **({"video_path": str(video) if video else None} if visitor.operator else {}),
                "video_url": links.url(video, request) if video else None,
                "sidecar_url": links.url(sidecar, request) if sidecar else None,
            }
        )
    return {
        "run_id": rows[0]["run_id"],
        "finished": all(state.finished for state in states),
        "states": dict(Counter(str(state) for state in states)),
        "requests": requests,
    }


def build_api(controller: StudioController, access: PageAccess, links: FileLinks) -> None:
    """The API-only endpoints, inside the page's Blocks. Long only by their number: each is a short closure over the
    controller, the page's access and its file links, declared here because gr.api registers an endpoint in the
    Blocks being built."""

    @gr.api(api_name="submit_run", concurrency_limit=None)
    async def submit_run(
        prompts: str,
        tier: Tier | None = None,
        aspect: Aspect = DEFAULT_ASPECT,
        frames: int | None = None,
        fps: int | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        seed: str = "",
        seed_policy: str = "fixed",
        copies: int = 1,
        concurrency: int = 1,
        guardrails: bool = True,
        negative_prompt: str = "",
        image_url: str = "",
        request: gr.Request = None,  # type: ignore[assignment]  # given by Gradio
        profile: gr.OAuthProfile | None = None,
    ) -> dict[str, Any]:
        """Queue a run: one video per prompt (a line each) and copy. Answers the run's record."""
        visitor = access.require(request, profile)
        form = {
            "prompts": prompts,
            "tier": tier or controller.settings.default_tier,
            "aspect": aspect,
            "frames": frames,
            "fps": fps,
            "steps": steps,
            "guidance": guidance,
            "seed": seed,
            "seed_policy": seed_policy,
            "copies": copies,
            "concurrency": concurrency,
            "guardrails": guardrails,
            "negative_prompt": negative_prompt,
            "image_url": image_url,
        }
        submitted = await handlers.submit_run(controller, form, visitor)
        if submitted.run is None:
            raise gr.Error(f"cannot generate: {submitted.refusal}", print_exception=False)
        record = run_record(submitted.run, links, request, operator=visitor.operator)
        return {**record, "note": submitted.note}

    @gr.api(api_name="run_status", concurrency_limit=None)
    async def run_status(
        run_id: str,
        request: gr.Request = None,  # type: ignore[assignment]
        profile: gr.OAuthProfile | None = None,
    ) -> dict[str, Any]:
        """A run's record now."""
        visitor = access.require(request, profile)
        run = _visible_run(controller, run_id, visitor)
        if run is None:  # finished long ago, or in an earlier studio: as history has it
            return await asyncio.to_thread(history_record, controller, run_id, visitor, links, request)
        return run_record(run, links, request, operator=visitor.operator)

    @gr.api(api_name="preview", concurrency_limit=None)
    def preview(
        request_id: str,
        request: gr.Request = None,  # type: ignore[assignment]
        profile: gr.OAuthProfile | None = None,
    ) -> dict[str, Any]:
        """The latest preview of a request of the caller's being made: {"request_id", "step", "image"} (a data
        URL). Refused, in the same words whether the request exists or not, for another visitor's request."""
        visitor = access.require(request, profile)
        found = controller.board.find((request_id or "").strip())
        view = found[1] if found is not None and found[1].id == (request_id or "").strip() else None
        if view is None or not (visitor.operator or view.visitor_id == visitor.id):
            raise gr.Error(
                f"no request {str(request_id)[:40]!r} of yours in this studio session", print_exception=False
            )
        if view.preview is None:
            raise gr.Error(
                f"request {view.id} has no preview ({view.state}): none has come from its server yet, or "
                "it is done (its video is there)",
                print_exception=False,
            )
        return {"request_id": view.id, "step": view.preview.step, "image": view.preview.image}

    @gr.api(api_name="wait_run", concurrency_limit=None)
    async def wait_run(
        run_id: str,
        timeout_s: float = 600.0,
        request: gr.Request = None,  # type: ignore[assignment]
        profile: gr.OAuthProfile | None = None,
    ) -> dict[str, Any]:
        """The run's record once it has finished, or when `timeout_s` has passed: a long-poll of at most 25 s
        (MAX_WAIT_S), whatever `timeout_s` asks. While `finished` is false, the run goes on: call again (or read
        /run_status now and then). A wait counts among the caller's calls in flight while it waits."""
        visitor = access.require(request, profile)
        run = _visible_run(controller, run_id, visitor)
        if run is None:  # no longer on the board: it has finished
            return await asyncio.to_thread(history_record, controller, run_id, visitor, links, request)
        try:
            async with asyncio.timeout(min(max(0.0, float(timeout_s)), MAX_WAIT_S)):
                while not run.finished:
                    await asyncio.sleep(WAIT_POLL_S)
        except TimeoutError:
            pass  # the record says it has not finished
        return run_record(run, links, request, operator=visitor.operator)
