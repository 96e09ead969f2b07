"""`omni-studio generate`: one video, headless. Progress goes to stderr; the mp4 path is the last stdout line.

A managed engine takes seconds to start, nearly all of it its own imports, so the request is checked and the
engine started before this process imports the rest of the studio (the run machinery, the HTTP SDK, the
progress display): the two then load side by side on different cores. That is why `run` imports only light
modules until the engine is starting, and `_send_and_report` imports the rest.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from studio import tiers
from studio.cli.exits import EXIT_FAILED, EXIT_USAGE
from studio.cli.flags import Subcommands
from studio.cli.studio_flags import add_engine_flags, add_studio_flags, studio_settings

if TYPE_CHECKING:
    from studio.backend.spec import RunSpec
    from studio.backend.store import OutputStore
    from studio.backend.supervisor import ManagedServer
    from studio.config import StudioSettings

GENERATE_POLL_S = 0.1
# The request's flags, as RunSpec names them; RunSpec checks their values.
REQUEST_FIELDS = ("negative_prompt", "aspect", "frames", "fps", "steps", "guidance", "seed")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "generate",
        help="make one video and print its mp4 path (last line)",
        description="Make one video; progress goes to stderr, the mp4's path is the last line on stdout.",
    )
    parser.add_argument("prompt", help="what the video shows")
    parser.add_argument("--negative-prompt", help="what it should not show")
    parser.add_argument("--tier", choices=tiers.TIERS, help="resolution tier (default: the settings' default tier)")
    parser.add_argument("--aspect", choices=tiers.ASPECTS, help="aspect ratio (default: 16:9)")
    parser.add_argument("--frames", type=int, help="frames, rounded up to 4k+1 (default: the tier's)")
    parser.add_argument(
        "--fps",
        type=int,
        help=f"frames per second: {', '.join(map(str, tiers.FPS_CHOICES))} (default: {tiers.DEFAULT_FPS})",
    )
    parser.add_argument("--steps", type=int, help="denoising steps (default: the server's)")
    parser.add_argument("--guidance", type=float, help="guidance scale (default: the server's)")
    parser.add_argument("--seed", type=int, help="seed (default: a random one, printed at the end)")
    parser.add_argument("--no-guardrails", action="store_true", help="turn guardrails off for this request")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    add_studio_flags(parser, ("outputs_dir",))
    add_engine_flags(parser)


def _spec(args: argparse.Namespace, settings: StudioSettings) -> RunSpec:
    from studio.backend.spec import RunSpec

    return RunSpec(
        prompts=[args.prompt],
        tier=args.tier or settings.default_tier,
        guardrails=not args.no_guardrails,
        concurrency=1,
        model=settings.served_model_name if settings.engine != "embedded" else None,
        **{name: getattr(args, name) for name in REQUEST_FIELDS if getattr(args, name) is not None},
    )


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from pydantic import ValidationError

    from studio.backend.launchers import LaunchError
    from studio.backend.store import OutputStore
    from studio.backend.supervisor import ServerStartError, managed_server_for

    settings = studio_settings(args)
    try:
        spec = _spec(args, settings)
        spec.shape()  # tier, frames and fps checked before anything starts
    except (ValidationError, tiers.TierError) as exc:
        _error(exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc))
        return EXIT_USAGE
    # One request: poll it often (a local engine answers a poll in milliseconds); the default interval is
    # sized for many requests at once.
    settings = settings.model_copy(update={"poll_interval_s": min(settings.poll_interval_s, GENERATE_POLL_S)})
    store = OutputStore(Path(settings.outputs_dir))
    server: ManagedServer | None = None
    try:
        if settings.engine in ("embedded", "vllm-omni"):
            print(f"starting the {settings.engine} engine ({settings.model}) ...", file=sys.stderr, flush=True)
            server = managed_server_for(settings, store.logs_dir)
            try:
                server.start(wait=False)
            except (ServerStartError, LaunchError, ValueError) as exc:
                _error(f"could not start the engine: {exc}")
                return EXIT_FAILED
        return asyncio.run(_send_and_report(args, settings, spec, store, server))
    finally:
        if server is not None:
            server.stop()
        store.close()


async def _send_and_report(
    args: argparse.Namespace,
    settings: StudioSettings,
    spec: RunSpec,
    store: OutputStore,
    server: ManagedServer | None,
) -> int:
    """Wait for the engine (`server`, started but not yet ready; None for remote servers), send the one
    request, show its progress, report the result."""
    from studio.startup import collector_paused

    with collector_paused():  # the rest of the studio, while the engine starts
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from studio.backend.client import ClientError, load_sdk
        from studio.backend.controller import StudioController
        from studio.backend.request_state import RequestState
        from studio.backend.supervisor import ServerStartError

    err = Console(stderr=True, soft_wrap=True)
    controller = StudioController(settings, store=store, server=server)
    try:
        try:
            load_sdk()  # while the engine starts: the two share no work, and a CPU has more than one core
            controller.start(wait=True)
        except (ServerStartError, ValueError) as exc:
            err.print(f"[red]error:[/red] could not start the engine: {exc}")
            return EXIT_FAILED
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
            return EXIT_FAILED
        t = view.timings
        # A server that answers only once the video is made tells no queue wait from inference: latency only.
        split = (
            "latency only"
            if t.queue_wait_s is None and t.inference_s is None
            else f"queue {t.queue_wait_s or 0:.2f} s, inference {t.inference_s or 0:.2f} s"
        )
        err.print(f"done in {t.latency_s:.2f} s ({split}), seed {view.request.seed}, sidecar {view.sidecar_path}")
        print(view.video_path, file=sys.stdout, flush=True)
        return 0
    except ClientError as exc:
        err.print(f"[red]error:[/red] {exc}")
        return EXIT_FAILED
    finally:
        if controller.pool is not None:
            await controller.pool.close()
        controller.close()
