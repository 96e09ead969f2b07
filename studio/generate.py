"""`omni-studio generate`: one video, headless. Progress goes to stderr; the mp4 path is the last stdout line."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from studio.backend.client import ClientError, load_sdk
from studio.backend.controller import StudioController
from studio.backend.launchers import LaunchError
from studio.backend.runner import RequestState, RunSpec
from studio.backend.server import ServerStartError
from studio.config import StudioSettings
from studio.tiers import TierError

GENERATE_POLL_S = 0.1


def _spec(args: argparse.Namespace, settings: StudioSettings) -> RunSpec:
    return RunSpec(
        prompts=[args.prompt],
        negative_prompt=args.negative_prompt,
        tier=args.tier or settings.default_tier,
        aspect=args.aspect,
        frames=args.frames,
        fps=args.fps,
        steps=args.steps,
        guidance=args.guidance,
        seed=args.seed,
        guardrails=not args.no_guardrails,
        concurrency=1,
        model=settings.served_model_name if settings.engine != "embedded" else None,
    )


async def run_generate(args: argparse.Namespace, settings: StudioSettings) -> int:
    err = Console(stderr=True, soft_wrap=True)
    try:
        spec = _spec(args, settings)
        spec.shape()  # tier, frames and fps checked before anything starts
    except (ValidationError, TierError) as exc:
        message = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        err.print(f"[red]error:[/red] {message}")
        return 2
    # One request: poll it often (a local engine answers a poll in milliseconds); the default interval is
    # sized for many requests at once.
    settings = settings.model_copy(update={"poll_interval_s": min(settings.poll_interval_s, GENERATE_POLL_S)})
    controller = StudioController(settings)
    try:
        if controller.managed:
            err.print(f"starting the {settings.engine} engine ({settings.model}) ...")
        try:
            controller.start(wait=False)
            load_sdk()  # while the engine starts: the two share no work, and a CPU has more than one core
            if controller.server is not None:
                controller.server.wait_ready()
        except (ServerStartError, LaunchError, ValueError) as exc:
            err.print(f"[red]error:[/red] could not start the engine: {exc}")
            return 1
        status = controller.server_status()
        if status is not None and status.startup_s is not None:
            err.print(f"engine ready in {status.startup_s:.1f} s at {status.url}")
        run = controller.new_run(spec)
        view = run.views[0]
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=err,
            disable=args.quiet or not err.is_terminal,
        ) as bar:
            task = bar.add_task(f"{view.request.size} x {view.request.num_frames} frames: waiting", total=100)
            async for update in run.updates():
                bar.update(task, completed=update.progress, description=f"{update.request.size}: {update.state}")
        if view.state is not RequestState.DONE:
            kind = "blocked by guardrails" if view.guardrail_blocked else str(view.state)
            err.print(f"[red]error:[/red] request {kind}: {view.error}")
            return 1
        t = view.timings
        err.print(
            f"done in {t.latency_s:.2f} s (queue {t.queue_wait_s or 0:.2f} s, inference {t.inference_s or 0:.2f} s), "
            f"seed {view.request.seed}, sidecar {view.sidecar_path}"
        )
        print(view.video_path, file=sys.stdout, flush=True)
        return 0
    except ClientError as exc:
        err.print(f"[red]error:[/red] {exc}")
        return 1
    finally:
        if controller.pool is not None:
            await controller.pool.close()
        controller.close()
