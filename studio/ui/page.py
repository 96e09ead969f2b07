"""The page: a header with the engine's state, and a tab each built by its own module. Stable elem_ids so
browser tests can find things; what the events do is in handlers.py and studio.backend."""

from __future__ import annotations

import html

import gradio as gr

from studio.backend.controller import StudioController
from studio.ui.bench_tab import build_bench_tab
from studio.ui.generate_tab import build_generate_tab
from studio.ui.history_tab import build_history_tab
from studio.ui.server_tab import build_server_tab

CSS = """
#engine-status { font-size: 0.9em; opacity: 0.85; }
#requests table { font-size: 0.85em; }
"""


def build_page(controller: StudioController) -> gr.Blocks:
    with gr.Blocks(title="Omni Studio") as demo:
        gr.Markdown("# Omni Studio")
        engine_status = gr.Markdown(html.escape(controller.engine_summary()), elem_id="engine-status")
        with gr.Tabs():
            with gr.Tab("Generate", id="generate-tab"):
                build_generate_tab(controller, engine_status)
            with gr.Tab("History", id="history-tab"):
                build_history_tab(controller)
            with gr.Tab("Bench", id="bench-tab"):
                build_bench_tab(controller)
            with gr.Tab("Server", id="server-tab"):
                build_server_tab(controller)
        demo.load(controller.start_in_background, None, None, api_visibility="private")

        @demo.load(api_visibility="private")
        async def resume_unfinished() -> None:
            """Opening the page follows up what a previous studio left unfinished."""
            await controller.resume_unfinished()

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
