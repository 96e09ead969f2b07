"""`omni-studio ui`: checks exposure, starts the engine, serves the page."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING, Any

from starlette.middleware import Middleware

from studio.backend.face import MAX_UPLOAD_BYTES, AccessError, AccessPolicy, StudioController, on_space, port_is_free
from studio.config import StudioSettings
from studio.gateway.keys import KeyFile, KeyFileError
from studio.ui.client_address import client_address, trust_forwarded_from
from studio.ui.file_guard import StudioFileGuard
from studio.ui.same_origin import SameOriginSignIn, cross_site
from studio.ui.sign_in_limit import SignInLedger, SignInLimit

if TYPE_CHECKING:
    import gradio as gr

    from studio.gateway.callers import GatewayAccess
    from studio.gateway.serving import VideoGateway
    from studio.ui.identity import PageAccess

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def exposure_problem(settings: StudioSettings, policy: AccessPolicy) -> str | None:
    """Serving beyond this machine needs a sign-in (accounts, or Hugging Face's on a Space), visitors allowed in
    without one (--allow-anonymous), or an explicit --insecure (everyone an operator)."""
    public = settings.share or settings.host not in LOOPBACK
    if public and not (policy.signs_in or policy.allow_anonymous or settings.insecure or on_space()):
        where = "--share" if settings.share else f"--host {settings.host}"
        return (
            f"{where} makes the studio reachable by others: add accounts with --auth user:pass (or --auth-file), "
            "let visitors in without one with --allow-anonymous, or --insecure to make every visitor an operator"
        )
    return None


def space_url() -> str | None:
    """The public address of the Space the studio runs on (SPACE_HOST may list a custom domain after it)."""
    host = os.environ.get("SPACE_HOST", "").split(",")[0].strip()
    return f"https://{host}" if on_space() and host else None


def access_policy(settings: StudioSettings) -> AccessPolicy:
    """The page's access rules; raises AccessError with a message for the command line."""
    return AccessPolicy.from_settings(settings)


def api_keys(settings: StudioSettings) -> KeyFile | None:
    """The gateway's keys (--api-key-file), read; raises KeyFileError with a message for the command line."""
    return KeyFile(settings.api_key_file) if settings.api_key_file is not None else None


def gateway_access(
    controller: StudioController, access: PageAccess, keys: KeyFile | None, ledger: SignInLedger
) -> GatewayAccess:
    """Who calls the gateway and the MCP tools: wrong keys count in the sign-in's ledger. A studio with no sign-in
    that serves this machine alone takes keyless calls as its operator's, as its page does."""
    from studio.gateway.callers import GatewayAccess

    settings = controller.settings
    local = access.policy.everyone_operator and not settings.share and settings.host in LOOPBACK
    return GatewayAccess(access.policy, keys, ledger, local_operator_without_keys=local)


def gateway_mount(gateway: VideoGateway, callers: GatewayAccess) -> Middleware:
    """vLLM-Omni's video API on the studio's port (studio/gateway/)."""
    from studio.gateway.mount import GatewayMount
    from studio.gateway.routes import build_gateway

    return Middleware(GatewayMount, gateway=build_gateway(gateway, callers, client_address, cross_site))


def launch_options(
    controller: StudioController,
    access: PageAccess,
    gateway: VideoGateway,
    callers: GatewayAccess,
    failures: SignInLedger,
) -> dict[str, Any]:
    """What `launch()` needs beyond host and port: the page's accounts, the studio's own file route, the gateway
    (its callers: `callers`), and Gradio kept from the outputs folder, its uploads bounded and its traffic figures
    off. `failures`: one ledger of failures for the page's passwords and the gateway's keys, so that a guesser gets
    no more tries by trying both."""
    from studio.ui.crowd_guards import crowd_guards
    from studio.ui.operator_calls import OperatorCalls
    from studio.ui.upload_limit import UploadLedger, upload_caps, upload_limit

    # Bodies bounded before anything reads them (outermost); each page session its maker's, each visitor's calls
    # in flight capped (innermost, where the caller is known).
    crowd = crowd_guards(controller, access)

    guard = Middleware(
        StudioFileGuard, outputs_root=controller.store.root, owner_of=controller.store.owner_of, book=access.book
    )
    # Each visitor's uploads per hour, capped before they are stored (the settings read live); unused ones swept.
    uploads = UploadLedger(lambda: upload_caps(controller.settings))
    return {
        "auth": list(access.policy.accounts) or None,
        "auth_message": "Omni Studio: sign in with the account the studio's operator gave you.",
        # Gradio serves nothing from the outputs folder, by any of its routes: the studio's file route does.
        "blocked_paths": [str(controller.store.root.resolve())],
        # An upload over the page's limit is refused by the upload route itself, before it is stored.
        "max_file_size": MAX_UPLOAD_BYTES,
        # Gradio's monitoring shows every visitor's calls and timings to anyone: off.
        "enable_monitoring": False,
        # Signing in and out from another site is refused; repeated failed sign-ins slow down, per account and
        # address and per address; the operator endpoints are an operator's alone, in the API listing too.
        "app_kwargs": {
            "middleware": [
                crowd.bodies,
                gateway_mount(gateway, callers),
                guard,
                upload_limit(uploads, access),
                Middleware(SameOriginSignIn),
                Middleware(SignInLimit, ledger=failures),
                Middleware(OperatorCalls, access=access),
                *crowd.calls,
            ],
            "lifespan": uploads.sweeping,
        },
    }


def serve_page(controller: StudioController, access: PageAccess, keys: KeyFile | None = None) -> gr.Blocks:
    """The page built and served on the settings' host and port, without blocking: what `omni-studio ui` runs."""
    from studio.gateway.serving import VideoGateway
    from studio.ui.page import CSS, build_page, enable_queue

    settings = controller.settings
    demo = enable_queue(build_page(controller, access))
    failures = SignInLedger()
    gateway, callers = VideoGateway(controller), gateway_access(controller, access, keys, failures)
    if settings.mcp:
        from studio.gateway.tools import VideoTools
        from studio.ui.mcp_tools import add_mcp_tools, use_studio_mcp_server

        follows = lambda: controller.settings.visitor_max_calls_in_flight  # noqa: E731  # read at each call
        add_mcp_tools(demo, VideoTools(gateway, callers, follows))
        use_studio_mcp_server()
    # uvicorn believes X-Forwarded-For from exactly the proxies the operator names (by default from none).
    trust_forwarded_from(settings.forwarded_allow_ips)
    demo.launch(
        server_name=settings.host,
        server_port=settings.port,
        share=settings.share,
        **launch_options(controller, access, gateway, callers, failures),
        mcp_server=settings.mcp,
        css=CSS,
        prevent_thread_lock=True,
        quiet=True,
        footer_links=["gradio", "settings"],
        ssr_mode=False,  # no Node.js server beside ours: one process to watch and stop
    )
    return demo


def launch_ui(settings: StudioSettings) -> int:
    try:
        policy = access_policy(settings)
        keys = api_keys(settings)
    except (AccessError, KeyFileError) as exc:
        print(f"omni-studio: error: {exc}", file=sys.stderr)
        return 2
    problem = exposure_problem(settings, policy)
    if problem:
        print(f"omni-studio: error: {problem}", file=sys.stderr)
        return 2
    taken = (
        f"omni-studio: error: port {settings.port} on {settings.host} is taken (another studio or program uses "
        "it): choose another with --port"
    )
    if not port_is_free(settings.port, settings.host):
        print(taken, file=sys.stderr)
        return 2
    from studio.ui.identity import PageAccess

    controller = StudioController(settings)
    controller.start_in_background()
    access = PageAccess(policy, new_guests_per_hour=lambda: controller.settings.new_guests_per_address_per_hour)
    gradio_said = io.StringIO()
    try:
        # Gradio's own lines speak of launch() arguments; the studio says the same in its flags' words, below.
        with contextlib.redirect_stdout(gradio_said):
            demo = serve_page(controller, access, keys)
    except OSError:  # taken between the check and the launch
        print(taken, file=sys.stderr)
        controller.close()
        return 2
    try:
        print(f"Omni Studio: open {demo.local_url} ({settings.engine} engine starting)", flush=True)
        if demo.share_url:
            print(f"Omni Studio: public link {demo.share_url} (up to a week)", flush=True)
        elif settings.share:
            # The tunnel binary and its server come from the internet; without them Gradio stays local.
            print(
                "Omni Studio: could not create a share link: no share tunnel can be reached from this machine "
                f"(it needs the internet). Still serving locally at {demo.local_url}",
                file=sys.stderr,
                flush=True,
            )
        elif space_url():
            print(f"Omni Studio: on the Space at {space_url()}", flush=True)
        else:
            print("Omni Studio: add --share for a public link", flush=True)
        demo.block_thread()
    finally:
        controller.close()
    return 0
