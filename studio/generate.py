"""`omni-studio generate`: one video, headless. Progress goes to stderr; the mp4 path is the last stdout line.

A managed engine takes seconds to start, nearly all of it its own imports, so the request is checked and the
engine started before this process imports the rest of the studio: the two then load side by side on
different cores. Only light modules are imported at the top of this file for that reason.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pydantic import ValidationError

from studio.backend.launchers import LaunchError
from studio.backend.spec import RunSpec
from studio.backend.store import OutputStore
from studio.backend.supervisor import ManagedServer, ServerStartError, managed_server_for
from studio.config import StudioSettings
from studio.startup import collector_paused
from studio.tiers import TierError

GENERATE_POLL_S = 0.1
EXIT_USAGE = 2
EXIT_FAILED = 1


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


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def run_generate(args: argparse.Namespace, settings: StudioSettings) -> int:
    try:
        spec = _spec(args, settings)
        spec.shape()  # tier, frames and fps checked before anything starts
    except (ValidationError, TierError) as exc:
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
        with collector_paused():
            from studio.generate_session import generate_one  # the rest of the studio, while the engine starts

        return asyncio.run(generate_one(args, settings, spec, store, server))
    finally:
        if server is not None:
            server.stop()
        store.close()
