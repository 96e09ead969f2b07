"""`omni-studio generate`: videos, headless. Progress goes to stderr (a bar per request); each finished mp4's path
goes to stdout, one a line, in the order of the prompts: with one prompt, its path is the last stdout line.

Several prompts are sent at once, over the fleet `--replicas` starts (the router gives each to the least busy
replica). A managed engine takes seconds to start, nearly all of it its own imports, so on this machine the
request is checked and the fleet set starting (servers/fleet_manager.py, as the page's is) before this process
imports the rest of the studio (the run machinery, the HTTP SDK, the progress display): the two then load side by
side on different cores. That is why `run` imports only light modules until the engine is starting, and
`_send_and_report` imports the rest. A fleet on Ray is set starting by the controller, after the imports.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from studio import tiers
from studio.backend.engine_kinds import EMBEDDED, engine_kind
from studio.cli.exits import EXIT_FAILED, EXIT_USAGE
from studio.cli.studio_flags import add_engine_flags, add_group_flags, add_studio_flags, studio_settings
from studio.cli.subcommands import Subcommands
from studio.config import ClientSettings, FleetSettings

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import Console

    from studio.backend.controller import StudioController
    from studio.backend.runs.request_state import RequestView
    from studio.backend.runs.spec import RunSpec
    from studio.backend.runs.store import OutputStore
    from studio.backend.servers.fleet_manager import FleetManager
    from studio.config import StudioSettings

GENERATE_POLL_S = 0.1
# The request's flags, as RunSpec names them; RunSpec checks their values.
REQUEST_FIELDS = ("negative_prompt", "aspect", "frames", "fps", "steps", "guidance", "seed", "image_url")
PROMPT_SHOWN_CHARS = 32  # of a prompt, in its progress bar and its error line


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "generate",
        help="make videos and print their mp4 paths (one prompt: its path is the last line)",
        description="Make a video per prompt, all sent at once; progress goes to stderr, each mp4's path to stdout, "
        "one a line in the order of the prompts. The exit status is non-zero when any request failed.",
    )
    parser.add_argument("prompts", nargs="+", metavar="PROMPT", help="what a video shows (one video per prompt)")
    parser.add_argument("--negative-prompt", help="what it should not show")
    parser.add_argument("--tier", choices=tiers.TIERS, help="resolution tier (default: the settings' default tier)")
    parser.add_argument("--aspect", choices=tiers.ASPECTS, help="aspect ratio (default: 16:9)")
    parser.add_argument(
        "--frames",
        type=int,
        help=f"frames, rounded up to 4k+1 (default: {EMBEDDED.defaults.frames} on the embedded engine, else the "
        f"tier's {tiers.DEFAULT_FRAMES[tiers.TIERS[0]]}; env OMNI_STUDIO_DEFAULT_FRAMES)",
    )
    parser.add_argument(
        "--fps",
        type=int,
        help=f"frames per second: {', '.join(map(str, tiers.FPS_CHOICES))} (default: {tiers.DEFAULT_FPS})",
    )
    parser.add_argument(
        "--steps", type=int, help=f"denoising steps (default: {tiers.DEFAULT_STEPS}; env OMNI_STUDIO_DEFAULT_STEPS)"
    )
    parser.add_argument("--guidance", type=float, help=f"guidance scale (default: {tiers.DEFAULT_GUIDANCE})")
    parser.add_argument("--seed", type=int, help="seed of every video (default: a random one each, printed at the end)")
    parser.add_argument("--no-guardrails", action="store_true", help="turn guardrails off for these requests")
    image = parser.add_mutually_exclusive_group()
    image.add_argument(
        "--image",
        type=Path,
        metavar="FILE",
        help="image-to-video from this image file, uploaded with each request (vLLM-Omni servers; PNG, JPEG, WEBP "
        "or BMP)",
    )
    image.add_argument(
        "--image-url",
        metavar="URL",
        help="image-to-video from the image at this http(s) URL, which the server fetches (vLLM-Omni and Cosmos "
        "Framework servers)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    add_studio_flags(parser, ("outputs_dir",))
    add_engine_flags(parser)
    # How long to wait on servers, and the fleet the videos are made on (as `ui` takes them).
    add_group_flags(parser, ClientSettings)
    add_group_flags(parser, FleetSettings)


def _spec(args: argparse.Namespace, settings: StudioSettings) -> RunSpec:
    """The run the flags ask for, with the engine's defaults where they give nothing (RunSpec.resolved, as the
    page's runs and the bench's have them)."""
    from studio.backend.runs.spec import MAX_CONCURRENCY, RunSpec

    spec = RunSpec(
        prompts=args.prompts,
        tier=args.tier or settings.default_tier,
        guardrails=not args.no_guardrails,
        # All at once: the studio's in-flight slots (per replica) hold back what the servers cannot take yet.
        concurrency=min(len(args.prompts), MAX_CONCURRENCY),
        input_reference=args.image,
        **{name: getattr(args, name) for name in REQUEST_FIELDS if getattr(args, name) is not None},
    )
    return spec.resolved(engine_kind(settings), settings)


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def _usage_message(exc: ValidationError, tier: str | None) -> str:
    """What is wrong with the request, in the page's voice (runs/problems.py), each field named by its flag."""
    from studio.backend.runs.problems import describe
    from studio.backend.runs.spec import count_range

    def flag(field: str) -> str:
        if field in REQUEST_FIELDS or field in ("tier", "copies"):
            return "--" + field.replace("_", "-")
        return "" if field == "prompts" else field.replace("_", " ")

    return describe(exc, flag, lambda field: count_range(field, tier))


def _checked_spec(args: argparse.Namespace, settings: StudioSettings) -> RunSpec | str:
    """The request, checked before anything starts; else what is wrong with it."""
    from pydantic import ValidationError

    from studio.backend.runs.spec import check_image_file

    blank = [str(index + 1) for index, prompt in enumerate(args.prompts) if not prompt.strip()]
    if blank and len(blank) < len(args.prompts):  # all blank: RunSpec says to write one
        return f"prompt {', '.join(blank)} of {len(args.prompts)} is empty: each prompt makes a video"
    try:
        spec = _spec(args, settings)
        spec.shape()  # tier, frames and fps
    except ValidationError as exc:
        return _usage_message(exc, args.tier or settings.default_tier)
    except tiers.TierError as exc:
        return str(exc)
    refusal = spec.image_refusal(settings.engine) or spec.too_many_requests(settings.max_run_requests)
    if refusal is not None:
        return refusal
    try:
        check_image_file(spec.input_reference)
    except ValueError as exc:
        return f"--image: {exc}"
    return spec


def generate_logs_dir(store: OutputStore) -> Path:
    """Where `generate`'s engines write their logs: `<outputs>/logs/generate/`."""
    return store.logs_dir / "generate"


def run(args: argparse.Namespace) -> int:
    import asyncio

    from studio.backend.runs.store import OutputStore
    from studio.backend.servers.fleet_manager import FleetManager
    from studio.backend.servers.launchers import LaunchError
    from studio.backend.servers.supervisor import ServerStartError

    settings = studio_settings(args)
    spec = _checked_spec(args, settings)
    if isinstance(spec, str):
        _error(spec)
        return EXIT_USAGE
    # Few requests: poll them often (a local engine answers a poll in milliseconds); the default interval is
    # sized for many requests at once.
    settings = settings.model_copy(update={"poll_interval_s": min(settings.poll_interval_s, GENERATE_POLL_S)})
    store = OutputStore(Path(settings.outputs_dir))
    # A managed fleet answers this process alone: with no key given, it gets a random one for this run. Its log
    # goes to a folder of its own: a studio serving the same outputs folder keeps its engine's log to itself.
    fleet = FleetManager(settings, generate_logs_dir(store))
    try:
        if fleet.managed:
            where = " on Ray" if settings.cluster == "ray" else ""
            count = "" if settings.replicas == 1 else f"{settings.replicas} replicas of "
            print(
                f"starting {count}the {settings.engine} engine ({settings.model}){where} ...",
                file=sys.stderr,
                flush=True,
            )
            if settings.cluster == "local":
                try:
                    fleet.launch()
                except (ServerStartError, LaunchError, ValueError) as exc:
                    _error(f"could not start the engine: {exc}")
                    return EXIT_FAILED
        return asyncio.run(_send_and_report(args, settings, spec, store, fleet))
    finally:
        fleet.stop()
        store.close()


async def _say_when_no_server_answers(controller: StudioController, settings: StudioSettings, err: Console) -> None:
    """Servers the studio attaches to may be down when it starts: the requests then wait for one to answer, for
    --server-wait seconds. Say so at once, and how to change it, rather than show nothing for that long."""
    pool = controller.fleet.pool
    if controller.managed or pool is None:
        return
    await pool.check_health()
    if any(endpoint.healthy for endpoint in pool.endpoints):
        return
    urls = ", ".join(endpoint.url for endpoint in pool.endpoints)
    err.print(
        f"no server answers at {urls}: waiting up to {settings.server_wait_s:g} s for one to come up "
        "(--server-wait SECONDS changes this; 0 gives up at once)"
    )


def _shown(prompt: str) -> str:
    return prompt if len(prompt) <= PROMPT_SHOWN_CHARS else prompt[: PROMPT_SHOWN_CHARS - 3] + "..."


def _label(view: RequestView, count: int) -> str:
    """A request as its progress bar and its lines name it: with several, its number and prompt first (as rich
    markup: the prompt is the user's text)."""
    from rich.markup import escape

    return "" if count == 1 else escape(f"[{view.position + 1}/{count}] {_shown(view.request.prompt)!r} ")


async def _send_and_report(
    args: argparse.Namespace,
    settings: StudioSettings,
    spec: RunSpec,
    store: OutputStore,
    fleet: FleetManager,
) -> int:
    """Wait for the engine (`fleet`: set starting already on this machine; on Ray and for remote servers the
    controller starts or attaches it), send the requests at once, show each one's progress, report the results."""
    from studio.startup import collector_paused

    with collector_paused():  # the rest of the studio, while the engine starts
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from studio.backend.clients.base import ClientError
        from studio.backend.clients.vllm_omni import load_sdk
        from studio.backend.controller import StudioController
        from studio.backend.runs.request_state import RequestState
        from studio.backend.servers.supervisor import ServerStartError

    err = Console(stderr=True, soft_wrap=True)
    controller = StudioController(settings, store=store, fleet=fleet)
    try:
        try:
            load_sdk()  # while the engine starts: the two share no work, and a CPU has more than one core
            controller.start(wait=True)
        except (ServerStartError, ValueError) as exc:
            err.print(f"[red]error:[/red] could not start the engine: {escape(str(exc))}")
            return EXIT_FAILED
        if len(controller.fleet.servers) == 1:
            status = controller.fleet.server_status()
            if status is not None and status.startup_s is not None:
                err.print(f"engine ready in {status.startup_s:.1f} s at {status.url}")
        elif controller.fleet.servers:
            startups = [s.status().startup_s or 0.0 for s in controller.fleet.servers]
            urls = ", ".join(s.base_url for s in controller.fleet.servers)
            err.print(f"fleet ready in {max(startups):.1f} s ({controller.fleet.layout}) at {urls}")
        await _say_when_no_server_answers(controller, settings, err)
        for hint in controller.prompt_hints(spec.prompts):
            err.print(f"note: {escape(hint)}")
        run = controller.new_run(spec)
        count = len(run.views)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=err,
            disable=args.quiet or not err.is_terminal,
        ) as bar:
            tasks = {
                view.id: bar.add_task(
                    f"{_label(view, count)}{view.request.size} x {view.request.num_frames} frames: waiting", total=100
                )
                for view in run.views
            }
            async for update in run.updates():
                # Steps where the server tells them (the embedded engine's events), else its percentage alone.
                steps = f" step {update.step}/{update.total_steps}" if update.total_steps else ""
                bar.update(
                    tasks[update.id],
                    completed=update.progress,
                    description=f"{_label(update, count)}{update.request.size}: {update.state}{steps}",
                )
        failed = 0
        for view in run.views:
            if view.state is not RequestState.DONE:
                failed += 1
                kind = "blocked by guardrails" if view.guardrail_blocked else str(view.state)
                err.print(f"[red]error:[/red] {_label(view, count)}request {kind}: {escape(str(view.error))}")
                continue
            t = view.timings
            # A server that answers only once the video is made tells no queue wait from inference: latency only.
            split = (
                "latency only"
                if t.queue_wait_s is None and t.inference_s is None
                else f"queue {t.queue_wait_s or 0:.2f} s, inference {t.inference_s or 0:.2f} s"
            )
            err.print(
                f"{_label(view, count)}done in {t.latency_s:.2f} s ({split}), seed {view.request.seed}, "
                f"sidecar {view.sidecar_path}"
            )
        for view in run.views:  # the paths last, in the order of the prompts
            if view.state is RequestState.DONE:
                print(view.video_path, file=sys.stdout, flush=True)
        if failed:
            if count > 1:
                err.print(f"[red]{failed} of {count} requests failed[/red]")
            return EXIT_FAILED
        return 0
    except (ClientError, RuntimeError) as exc:  # RuntimeError: a run the outputs folder has no room for
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return EXIT_FAILED
    finally:
        if controller.fleet.pool is not None:
            await controller.fleet.pool.close()
        controller.close()
