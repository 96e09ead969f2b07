"""The part of `omni-studio generate` that runs once the engine is starting: wait for it, send the one
request, show its progress, report the result (studio/generate.py checks the request and starts the engine)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from studio.backend.client import ClientError, load_sdk
from studio.backend.controller import StudioController
from studio.backend.runs import RequestState
from studio.backend.spec import RunSpec
from studio.backend.store import OutputStore
from studio.backend.supervisor import ManagedServer, ServerStartError
from studio.config import StudioSettings


async def generate_one(
    args: argparse.Namespace,
    settings: StudioSettings,
    spec: RunSpec,
    store: OutputStore,
    server: ManagedServer | None,
) -> int:
    """`server`: the managed engine, started (not yet ready) by the caller; None for remote servers."""
    err = Console(stderr=True, soft_wrap=True)
    controller = StudioController(settings, store=store, server=server)
    try:
        try:
            load_sdk()  # while the engine starts: the two share no work, and a CPU has more than one core
            controller.start(wait=True)
        except (ServerStartError, ValueError) as exc:
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
