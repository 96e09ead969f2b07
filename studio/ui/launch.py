"""`omni-studio ui`: checks exposure, starts the engine, serves the page."""

from __future__ import annotations

import contextlib
import io
import sys

from studio.backend.controller import StudioController
from studio.backend.supervisor import port_is_free
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
    taken = (
        f"omni-studio: error: port {settings.port} on {settings.host} is taken (another studio or program uses "
        "it): choose another with --port"
    )
    if not port_is_free(settings.port, settings.host):
        print(taken, file=sys.stderr)
        return 2
    from studio.ui.page import CSS, build_page, enable_queue

    controller = StudioController(settings)
    controller.start_in_background()
    demo = build_page(controller)
    enable_queue(demo)
    gradio_said = io.StringIO()
    try:
        # Gradio's own lines speak of launch() arguments; the studio says the same in its flags' words, below.
        with contextlib.redirect_stdout(gradio_said):
            demo.launch(
                server_name=settings.host,
                server_port=settings.port,
                share=settings.share,
                auth=auth,
                allowed_paths=[str(controller.store.root.resolve())],
                css=CSS,
                prevent_thread_lock=True,
                quiet=True,
                footer_links=["gradio", "settings"],
                ssr_mode=False,  # no Node.js server beside ours: one process to watch and stop
            )
    except OSError:  # taken between the check and the launch
        print(taken, file=sys.stderr)
        controller.close()
        return 2
    try:
        print(f"Omni Studio: open {demo.local_url} ({settings.engine} engine starting)", flush=True)
        if demo.share_url:
            print(f"Omni Studio: public link {demo.share_url} (up to a week; --auth guards it)", flush=True)
        elif settings.share:
            # The tunnel binary and its server come from the internet; without them Gradio stays local.
            print(
                "Omni Studio: could not create a share link: no share tunnel can be reached from this machine "
                f"(it needs the internet). Still serving locally at {demo.local_url}",
                file=sys.stderr,
                flush=True,
            )
        else:
            print("Omni Studio: add --share for a public link", flush=True)
        demo.block_thread()
    finally:
        controller.close()
    return 0
