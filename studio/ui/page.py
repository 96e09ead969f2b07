"""The page: a header with the engine's state and who is signed in, and a tab each built by its own module.
Stable elem_ids so browser tests can find things; what the events do is in handlers.py and studio.backend.

Every visitor gets the same page; what it shows them is decided per event (identity.py): their own work, the
operator's tabs only for operators."""

from __future__ import annotations

import gradio as gr

from studio.backend.access import AccessPolicy
from studio.backend.controller import StudioController
from studio.ui.bench_tab import build_bench_tab
from studio.ui.generate_tab import build_generate_tab
from studio.ui.history_tab import build_history_tab
from studio.ui.identity import EVERYONE, MINE, PageAccess, browser_of
from studio.ui.markdown import markdown_text
from studio.ui.server_tab import build_server_tab

UPLOADS_KEPT = (600, 3600)  # every 10 minutes, what is older than an hour

CSS = """
#engine-status { font-size: 0.9em; opacity: 0.85; }
#who { font-size: 0.9em; }
#requests table { font-size: 0.85em; }
"""


def build_page(controller: StudioController, access: PageAccess | None = None) -> gr.Blocks:
    access = access or PageAccess(AccessPolicy.from_settings(controller.settings))
    operators_only = not access.policy.everyone_operator  # the operator's tabs start hidden where not everyone is one
    # What visitors upload (images for image-to-video) is deleted an hour after it came: a run copies what it
    # needs when it is submitted.
    with gr.Blocks(title="Omni Studio", delete_cache=UPLOADS_KEPT) as demo:
        with gr.Row(equal_height=True):
            gr.Markdown("# Omni Studio")
            who = gr.Markdown("", elem_id="who")
            if access.policy.hf_sign_in:
                gr.LoginButton(elem_id="login")
            show = gr.Radio(
                [MINE, EVERYONE], value=MINE, label="Show", visible=False, elem_id="show", scale=0, min_width=200
            )
        engine_status = gr.Markdown(markdown_text(controller.public_summary()), elem_id="engine-status")
        with gr.Tabs():
            with gr.Tab("Generate", id="generate-tab"):
                build_generate_tab(controller, access, engine_status, show)
            with gr.Tab("History", id="history-tab"):
                build_history_tab(controller, access, show, opened=demo.load)
            with gr.Tab("Bench", id="bench-tab", visible=not operators_only) as bench_tab:
                build_bench_tab(controller, access)
            with gr.Tab("Server", id="server-tab", visible=not operators_only) as server_tab:
                build_server_tab(controller, access)
        demo.load(controller.start_in_background, None, None, api_visibility="private")

        @demo.load(outputs=[who, show, bench_tab, server_tab], api_visibility="private")
        def on_open(request: gr.Request, profile: gr.OAuthProfile | None) -> dict[gr.Component, object]:
            visitor = access.visitor(request, profile)
            operator = visitor is not None and visitor.operator
            if visitor is not None:
                controller.page_opened(visitor, request.session_hash or browser_of(request))
            return {
                who: access.header(visitor),
                show: gr.Radio(visible=operator),
                bench_tab: gr.Tab(visible=operator),
                server_tab: gr.Tab(visible=operator),
            }

        @demo.unload
        def on_close(request: gr.Request, profile: gr.OAuthProfile | None) -> None:
            """The visitor's last page closed: what they queued and the servers have not started is cancelled."""
            visitor = access.visitor(request, profile)
            # Without sign-in everyone is the one operator at the keyboard: a closed tab may be opened again, and
            # one person's closed tab must not cancel what another queued. Their work is kept.
            if visitor is not None and not access.policy.everyone_operator:
                controller.page_closed(visitor, request.session_hash or browser_of(request))

    return demo


# Gradio's queue looks for new events every millisecond while it has none: about a tenth of a core spent
# doing nothing, all day. Every 20 ms is still far quicker than the page's own 1 s refresh.
IDLE_QUEUE_POLL_S = 0.02


def enable_queue(demo: gr.Blocks) -> gr.Blocks:
    """Turn on the page's event queue (no concurrency cap: many users and timers at once) and calm its idle loop."""
    demo.queue(default_concurrency_limit=None)
    queue = getattr(demo, "_queue", None)
    if queue is not None and getattr(queue, "sleep_when_free", IDLE_QUEUE_POLL_S) < IDLE_QUEUE_POLL_S:
        queue.sleep_when_free = IDLE_QUEUE_POLL_S
    return demo
