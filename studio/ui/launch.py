"""`omni-studio ui`: checks exposure, starts the engine, serves the page."""

from __future__ import annotations

import sys

from studio.backend.controller import StudioController
from studio.config import StudioSettings

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def exposure_problem(settings: StudioSettings) -> str | None:
    """Serving beyond this machine without a password needs an explicit --insecure."""
    public = settings.share or settings.host not in LOOPBACK
    if public and not settings.auth and not settings.insecure:
        where = "--share" if settings.share else f"--host {settings.host}"
        return f"{where} makes the studio reachable by others: add --auth user:pass (or --insecure if you mean it)"
    return None


def parse_auth(auth: str | None) -> tuple[str, str] | None:
    if auth is None:
        return None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ValueError("--auth takes user:pass")
    return user, password


def launch_ui(settings: StudioSettings) -> int:
    problem = exposure_problem(settings)
    if problem:
        print(f"omni-studio: error: {problem}", file=sys.stderr)
        return 2
    try:
        auth = parse_auth(settings.auth)
    except ValueError as exc:
        print(f"omni-studio: error: {exc}", file=sys.stderr)
        return 2
    from studio.ui.page import CSS, build_page, enable_queue

    controller = StudioController(settings)
    controller.start_in_background()
    demo = build_page(controller)
    enable_queue(demo)
    print(
        f"Omni Studio: open http://{settings.host}:{settings.port} ({settings.engine} engine starting)",
        flush=True,
    )
    try:
        demo.launch(
            server_name=settings.host,
            server_port=settings.port,
            share=settings.share,
            auth=auth,
            allowed_paths=[str(controller.store.root.resolve())],
            css=CSS,
            prevent_thread_lock=True,
            quiet=False,
            footer_links=["gradio", "settings"],
            ssr_mode=False,  # no Node.js server beside ours: one process to watch and stop
        )
        if settings.share and not demo.share_url:
            # The tunnel binary and its server come from the internet; without them Gradio stays local.
            print(
                "Omni Studio: could not create a share link (Gradio's tunnel could not be reached). "
                f"Still serving locally at {demo.local_url}",
                file=sys.stderr,
                flush=True,
            )
        demo.block_thread()
    finally:
        controller.close()
    return 0
