"""The page: a header with the engine's state and who is signed in, and a tab each built by its own module.
Stable elem_ids so browser tests can find things; what the events do is in handlers.py and studio.backend.

Every visitor gets the same page; what it shows them is decided per event (identity.py): their own work, the
operator's tabs only for operators."""

from __future__ import annotations

import warnings
from typing import Any

import gradio as gr

from studio.backend.face import AccessPolicy, StudioController
from studio.ui.api import build_api
from studio.ui.bench_tab import build_bench_tab
from studio.ui.engine_status import public_summary
from studio.ui.file_links import FileLinks
from studio.ui.generate_tab import build_generate_tab, guardrails_switch
from studio.ui.history_tab import Reuse, build_history_tab
from studio.ui.identity import EVERYONE, MINE, PageAccess, browser_of
from studio.ui.markdown import markdown_text
from studio.ui.server_tab import build_server_tab

UPLOADS_KEPT = (600, 3600)  # every 10 minutes, what is older than an hour

# The page's look: shades of the blue the bench's plots draw inference in (studio/backend/bench/plots.py), compact spacing, the
# font Gradio serves itself (no font from the internet). "stop" buttons (Cancel all) are outlined, not filled: the
# Generate button is the one filled action of its tab.
STUDIO_BLUE = gr.themes.Color(
    c50="#eef5fa",
    c100="#d6e7f2",
    c200="#b0d0e6",
    c300="#82b3d4",
    c400="#5596c0",
    c500="#3a7ca5",
    c600="#2f668a",
    c700="#285370",
    c800="#22445b",
    c900="#1d3849",
    c950="#132532",
    name="studio_blue",
)
THEME = gr.themes.Default(
    primary_hue=STUDIO_BLUE,
    secondary_hue=STUDIO_BLUE,
    neutral_hue="slate",
    spacing_size="sm",
    radius_size="sm",
).set(
    button_border_width="1px",
    button_cancel_background_fill="*background_fill_primary",
    button_cancel_background_fill_hover=gr.themes.colors.red.c50,
    button_cancel_background_fill_dark="*background_fill_primary",
    button_cancel_background_fill_hover_dark="*neutral_800",
    button_cancel_border_color=gr.themes.colors.red.c300,
    button_cancel_border_color_hover=gr.themes.colors.red.c500,
    button_cancel_text_color=gr.themes.colors.red.c600,
    button_cancel_text_color_hover=gr.themes.colors.red.c700,
    button_cancel_text_color_dark=gr.themes.colors.red.c400,
    button_cancel_text_color_hover_dark=gr.themes.colors.red.c300,
)

# Selectors start at .gradio-container: Gradio loads a component's own styles when it first draws one, after these,
# so a rule of the same weight would lose to them.
CSS = """
/* The header is one line: the title, who is signed in, the mine/everyone switch where there is one. */
#header { align-items: center; flex-wrap: nowrap; }
#header h1 { margin: 0; }
#who { font-size: 0.9em; }
#show { flex-grow: 0; }
#show .wrap { flex-wrap: nowrap; }
#engine-status { font-size: 0.9em; opacity: 0.85; }

/* The form's choices stay on one line: each is as wide as its options side by side, the box beside it takes the
   rest, down to what a number needs (Gradio gives every box 160 px, inline). */
.gradio-container #tier, .gradio-container #fps,
.gradio-container #seed-policy { flex: 0 0 auto; width: max-content; max-width: 100%; }
.gradio-container #concurrency { flex-grow: 2; }
.gradio-container #aspect, .gradio-container #copies { min-width: 100px !important; }
.gradio-container #frames, .gradio-container #seed { min-width: 80px !important; }
.gradio-container #tier label, .gradio-container #fps label,
.gradio-container #seed-policy label { padding: var(--size-1) var(--size-1-5); }
.gradio-container #tier label > span, .gradio-container #fps label > span,
.gradio-container #seed-policy label > span { margin-left: 5px; }
.gradio-container #concurrency .head label { white-space: nowrap; }
.gradio-container #bench-apply { white-space: nowrap; }

/* The requests being made, each a tile with its latest preview (studio/ui/previews.py). */
#running .running-tiles { display: flex; flex-wrap: wrap; gap: var(--size-2); align-items: flex-start; }
#running .running-title { flex-basis: 100%; margin: 0; font-size: var(--text-sm); color: var(--body-text-color-subdued); }
#running .running-tile { margin: 0; }
#running figcaption { font-size: 11px; line-height: 1.3; margin-top: 2px; overflow-wrap: anywhere; }
#running .tile-state { font-size: var(--text-sm); color: var(--body-text-color); }
#running .tile-progress { height: 4px; margin-top: 3px; background: var(--background-fill-secondary); border-radius: 2px; }
#running .tile-progress > span { display: block; height: 100%; background: var(--color-accent); border-radius: 2px; }
/* The selected video, sized to itself by its box (previews.player_box): the player fills the box. */
.gradio-container .studio-player video { width: 100% !important; }
/* What to do where there is nothing to show yet; which request or run the buttons beside act on. */
#gallery-note, #figures-note, #history-picked, #selection { color: var(--body-text-color-subdued); }
#request-actions, #history-actions { align-items: center; }
/* Readable lists (markdown.markdown_pairs): a video's settings, the doctor's report, compact as a form's rows. */
.gradio-container #details table, .gradio-container #doctor-text table { font-size: var(--text-sm); margin: var(--size-1) 0; }
.gradio-container #details th, .gradio-container #details td,
.gradio-container #doctor-text th, .gradio-container #doctor-text td { padding: 2px var(--size-2); }
#running .preview-empty, #video .preview-empty {
    display: flex; align-items: center; justify-content: center; text-align: center; width: 100%;
    background: var(--background-fill-secondary); border: 1px dashed var(--border-color-primary);
    font-size: 11px; color: var(--body-text-color-subdued); padding: var(--size-1);
}
#video .selected-forming { display: flex; flex-direction: column; align-items: center; }
#video .selected-forming img, #video .selected-forming .preview-empty { width: auto; max-width: 100%; height: auto; }
#video .selected-forming .preview-empty { width: 100%; }
#video .selected-forming-state { font-size: var(--text-sm); margin: var(--size-1) 0 0; }

/* A field the check found wrong (handlers.form_problems): outlined, its info line saying what is wrong. */
.gradio-container .field-problem { outline: 2px solid var(--error-border-color, #ef4444); outline-offset: -2px; }
.gradio-container .field-problem [data-testid="block-info"],
.gradio-container .field-problem .info,
.gradio-container .field-problem span[data-testid="block-info"] + div { color: var(--error-text-color, #b91c1c); }

/* Tables fit their box. Gradio sizes a dataframe's columns from a hidden row of each column's longest text; let
   that row wrap between words and the table takes the box's width, each column at least its longest word. Cells
   and headers then wrap between words, never inside one (Gradio's own wrap breaks words anywhere). */
.gradio-container .table-wrap .header-table,
.gradio-container .table-wrap .virtual-row {
    font-family: var(--font);
    font-size: var(--text-sm);
    font-variant-numeric: tabular-nums;
}
.gradio-container .table-wrap .sizing-body td { white-space: normal; padding: var(--size-1); }
.gradio-container .table-wrap .cell-wrap { padding: var(--size-1); }
.gradio-container .table-wrap span.text,
.gradio-container .table-wrap .body-cell.cell-solo .cell-wrap > span.text {
    white-space: normal;
    word-break: normal;
    overflow-wrap: normal;
    text-overflow: clip;
}
.gradio-container .table-wrap .header-cell { text-align: left; vertical-align: bottom; }
/* Headers a size smaller than the cells, in the font's own bold (no faux one): a column as narrow as its
   numbers still holds its header's longest word. */
.gradio-container .table-wrap .header-cell span.text { font-size: 11px; font-weight: 600; }

/* Gallery tiles keep their video's shape (Gradio crops every tile to a square): each is as wide as its column
   and as tall as its picture, up to a bound. */
.gradio-container .grid-container .thumbnail-item {
    aspect-ratio: auto;
    height: auto;
    display: flex;
    align-items: center;
    justify-content: center;
}
.gradio-container .grid-container .thumbnail-item > img,
.gradio-container .grid-container .thumbnail-item > video {
    width: auto;
    height: auto;
    max-width: 100%;
    max-height: 240px;
    object-fit: contain;
}
/* The finished videos keep three to a row however few there are (Gradio widens the columns to fill the row). */
.gradio-container #gallery .grid-container { --grid-cols: 3 !important; }
/* A run's videos: the gallery as tall as its tiles, up to a bound (Gradio's "auto" is at least 450 px). */
.gradio-container #history-gallery .grid-wrap { min-height: 0; max-height: 540px; }
.gradio-container #gallery .grid-wrap { min-height: 0; max-height: 540px; }
/* The bench's plots are read, not glanced at: each as wide as its column, all of them shown. */
.gradio-container #bench-plots .thumbnail-item > img,
.gradio-container #bench-plan-plot .thumbnail-item > img { width: 100%; max-height: none; }
.gradio-container #bench-plots .grid-wrap, .gradio-container #bench-plan-plot .grid-wrap { max-height: none; }
"""

GENERATE_TAB = "generate-tab"  # the Tabs id History switches to when it fills the form


def themed_blocks(**options: Any) -> gr.Blocks:
    """gr.Blocks with the studio's THEME. Gradio 6 takes a theme at launch(); one given here is what launch() uses
    when it is given none (the studio's serve_page passes the CSS only), so every way the page is served gets it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The parameters have been moved", category=UserWarning)
        return gr.Blocks(theme=THEME, **options)


def build_page(controller: StudioController, access: PageAccess | None = None) -> gr.Blocks:
    access = access or PageAccess(AccessPolicy.from_settings(controller.settings))
    operators_only = not access.policy.everyone_operator  # the operator's tabs start hidden where not everyone is one
    # What visitors upload (images for image-to-video) is deleted an hour after it came: a run copies what it
    # needs when it is submitted.
    # The mine/everyone switch is for an operator among other visitors: where everyone is the one operator, all
    # the work is theirs and the switch would change nothing.
    lone_operator = access.policy.everyone_operator
    with themed_blocks(title="Omni Studio", delete_cache=UPLOADS_KEPT) as demo:
        with gr.Row(elem_id="header"):
            gr.Markdown("# Omni Studio", elem_id="title")
            who = gr.Markdown("", elem_id="who")
            if access.policy.hf_sign_in:
                gr.LoginButton(elem_id="login", scale=0)
            show = gr.Radio(
                [("my work", MINE), ("everyone's", EVERYONE)],  # what it shows, without a label above it
                value=MINE,
                label="Show",
                show_label=False,
                container=False,
                visible=False,
                elem_id="show",
                scale=0,
                min_width=210,
            )
        engine_status = gr.Markdown(markdown_text(public_summary(controller)), elem_id="engine-status")
        with gr.Tabs() as tabs:
            with gr.Tab("Generate", id=GENERATE_TAB):
                generate_tab = build_generate_tab(controller, access, engine_status, show)
            with gr.Tab("History", id="history-tab"):
                build_history_tab(
                    controller,
                    access,
                    show,
                    opened=demo.load,
                    reuse=Reuse(tabs, GENERATE_TAB, generate_tab.form, generate_tab.advanced),
                )
            with gr.Tab("Bench", id="bench-tab", visible=not operators_only) as bench_tab:
                build_bench_tab(controller, access, opened=demo.load)
            with gr.Tab("Server", id="server-tab", visible=not operators_only) as server_tab:
                build_server_tab(controller, access)
        # For programs: structured runs (their ids, requests, states, videos), beside the page's own events.
        build_api(controller, access, FileLinks(controller.store.root))
        demo.load(controller.start_in_background, None, None, api_visibility="private")

        @demo.load(outputs=[who, show, bench_tab, server_tab, generate_tab.guardrails], api_visibility="private")
        def on_open(request: gr.Request, profile: gr.OAuthProfile | None) -> dict[gr.Component, object]:
            visitor = access.visitor(request, profile)
            operator = visitor is not None and visitor.operator
            if visitor is not None:
                controller.page_opened(visitor, request.session_hash or browser_of(request))
            return {
                who: access.header(visitor),
                show: gr.Radio(visible=operator and not lone_operator),
                bench_tab: gr.Tab(visible=operator),
                server_tab: gr.Tab(visible=operator),
                generate_tab.guardrails: guardrails_switch(controller, visitor),
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
