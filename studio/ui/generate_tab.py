"""The Generate tab: the form, the requests of this studio (table, statistics, gallery, figures) and cancel.

The form's components are named by the fields handlers.build_spec reads, and reach the handler by those names
(`inputs_kwargs`): the same names are the `/generate` endpoint's parameters for API clients.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import get_upload_folder

from studio import grammar, tiers
from studio.backend.face import (
    MAX_CONCURRENCY,
    MAX_UPLOAD_BYTES,
    RequestView,
    SeedPolicy,
    StudioController,
    Visitor,
    engine_kind,
    for_visitors,
    image_inputs,
    summarize,
)
from studio.ui import figures, gallery, handlers, previews, tables
from studio.ui.engine_status import engine_summary
from studio.ui.file_links import FileLinks
from studio.ui.identity import EVERYONE, MINE, PageAccess
from studio.ui.markdown import clipped, markdown_code, markdown_text

EXAMPLES = [
    "a red circle moving left on a white background",
    "two blue squares moving up on black",
    "a yellow triangle moving right on a gray background",
    "a green circle growing on a white background",
]
REFRESH_S = 1.0
# What the page says where it has nothing to show yet.
NO_VIDEOS = "No videos yet: write a prompt and press **Generate**. They appear here as they finish."
NO_SELECTION = "Select a request in the table to cancel it or move it in its run's order."
NO_FIGURES = (
    "The latency, throughput and timeline plots appear after the first video of the run finishes. "
    "Latency runs from pressing Generate to the video in the page."
)
FIGURES_NOTE = (
    "Latency runs from pressing Generate to the video in the page. Time axes count seconds of work in "
    "flight: idle gaps between runs are left out."
)


@dataclass(frozen=True)
class GenerateTab:
    status: gr.Markdown  # the status line, also where the Server tab's buttons answer
    guardrails: gr.Checkbox  # the switch, set for each visitor as their page opens (guardrails_switch)
    form: dict[str, gr.Component]  # what History's "use these settings" fills
    advanced: gr.Accordion  # the fields past prompts, tier and aspect: opened where a value is set there


# What a visitor's switch says where the studio keeps the guardrail on for every visitor (visitor_guardrails forced).
GUARDRAILS_FORCED_INFO = "on for every visitor of this studio: its operator decides (--visitor-guardrails)"


def guardrails_switch(controller: StudioController, visitor: Visitor | None) -> gr.Checkbox:
    """The guardrails switch as `visitor` may use it: where the server takes guardrails per request, a visitor under
    the forced policy sees it on and fixed, with why; anyone else as the form was built."""
    per_request = controller.kind.capabilities.request_guardrails
    if not per_request:
        return gr.Checkbox(value=True, interactive=False, info=per_request.why_not)
    if visitor is not None and not visitor.operator and controller.settings.visitor_guardrails == "forced":
        return gr.Checkbox(value=True, interactive=False, info=GUARDRAILS_FORCED_INFO)
    return gr.Checkbox(interactive=True)


# The fields generate_form lays out above the Generate button; more_fields lays out the rest, in the fold.
FIRST_FIELDS = ("prompts", "tier", "aspect")


def generate_form(controller: StudioController) -> dict[str, gr.Component]:
    """The form's first inputs, laid out, keyed by the fields of handlers.build_spec: what every run names (its
    prompts, tier and aspect). The Generate button follows them, in view as the page opens; then the rest
    (more_fields) and the examples."""
    settings = controller.settings
    prompts = gr.Textbox(
        label='Prompts (one per line; "9:16 | ..." gives a line its own aspect)',
        lines=3,
        elem_id="prompt",
        placeholder=EXAMPLES[0],
    )
    form: dict[str, gr.Component] = {"prompts": prompts}
    with gr.Row():
        form["tier"] = gr.Radio(list(tiers.TIERS), value=settings.default_tier, label="Tier", elem_id="tier")
        form["aspect"] = gr.Dropdown(list(tiers.ASPECTS), value=tiers.DEFAULT_ASPECT, label="Aspect", elem_id="aspect")
    return form


def prompt_examples(controller: StudioController, prompts: gr.Textbox) -> None:
    """Prompts to start from, and what the default model draws (its prompts follow a grammar)."""
    gr.Examples(EXAMPLES, inputs=[prompts], label="Examples")
    if controller.serves_small_model:
        with gr.Accordion("What the default model draws", open=False, elem_id="grammar"):
            gr.Markdown(markdown_text(grammar.summary()), elem_id="grammar-hint")


def more_fields(controller: StudioController, form: dict[str, gr.Component]) -> None:
    """The rest of the form, below the Generate button, added to `form`."""
    settings = controller.settings
    form["negative_prompt"] = gr.Textbox(value="", label="Negative prompt", elem_id="negative")
    defaults = controller.run_defaults(settings.default_tier)  # what a run asks where the form says nothing
    with gr.Row():
        # Limits are checked by the back end, which says what is wrong in the status line.
        # No precision: a value such as 2.5 reaches the check as typed, which says what frames take.
        form["frames"] = gr.Number(value=defaults.frames, label="Frames", elem_id="frames")
        form["fps"] = gr.Radio([str(f) for f in tiers.FPS_CHOICES], value=str(defaults.fps), label="fps", elem_id="fps")
    with gr.Row():
        form["steps"] = gr.Number(value=defaults.steps, label="Steps", elem_id="steps")
        form["guidance"] = gr.Number(value=defaults.guidance, label="Guidance", elem_id="guidance")
    with gr.Row():
        form["seed"] = gr.Textbox(value="", label="Seed (empty: random)", elem_id="seed")
        form["seed_policy"] = gr.Radio(
            [policy.value for policy in SeedPolicy],
            value=SeedPolicy.INCREMENT.value,
            label="Seed per copy",
            elem_id="seed-policy",
        )
    with gr.Row():
        form["copies"] = gr.Number(value=1, label="Copies per prompt", elem_id="copies")
        form["concurrency"] = gr.Slider(
            1, MAX_CONCURRENCY, value=4, step=1, label="Concurrency (in flight)", elem_id="concurrency"
        )
    with gr.Row():
        # Servers that set guardrails when they start (the Cosmos Framework's): the switch shows that, and cannot
        # be used.
        per_request = engine_kind(settings).capabilities.request_guardrails
        form["guardrails"] = gr.Checkbox(
            value=True,
            label="Guardrails",
            info=per_request.why_not,
            interactive=bool(per_request),
            elem_id="guardrails",
        )
        form["sound"] = gr.Checkbox(value=False, label="Sound (models that have it)", elem_id="sound")
    image_form(form, settings.engine)


FIELD_PROBLEM_CLASS = "field-problem"


def digest(text: str) -> str:
    """A short digest of what a component shows: kept in the session's state to tell whether it changed."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def field_problem_update(component: gr.Component, info: str | None, problem: str | None) -> dict[str, Any]:
    """A form field marked with what is wrong with it (its info line says it), or back to how it was."""
    update: dict[str, Any] = {"elem_classes": [FIELD_PROBLEM_CLASS] if problem else []}
    if "info" in inspect.signature(type(component).__init__).parameters:
        update["info"] = f"⚠ {problem}" if problem else info or ""  # None would leave the warning shown
    return gr.update(**update)


def image_form(form: dict[str, gr.Component], engine: str) -> None:
    """The image for image-to-video, as the engine's contract takes it: an upload, an http(s) URL the server
    fetches, or neither; what the engine does not take is hidden and the page says why. Both stay in the form (an
    API caller may send either; the back end refuses what the engine cannot take, with the same reason)."""
    takes = image_inputs(engine)
    url_info = takes.why_not or "for image-to-video: an http(s) address the server fetches, instead of an upload"
    with gr.Row():
        form["image"] = gr.Image(
            type="filepath",
            sources=["upload"],
            label=f"Image for image-to-video (up to {MAX_UPLOAD_BYTES // 2**20} MB)",
            elem_id="image",
            height=160,
            visible=takes.upload,
        )
        form["image_url"] = gr.Textbox(
            value="",
            label="Image URL",
            placeholder="https://example.com/first-frame.png",
            info=url_info,
            visible=takes.url,
            elem_id="image-url",
        )
    if not (takes.upload or takes.url):
        gr.Markdown(f"Image-to-video: {takes.why_not}.", elem_id="image-note")


@dataclass(frozen=True)
class FigurePlots:
    span: gr.Radio  # what they cover: the latest run or the session
    note: gr.Markdown  # what they show, or when they will show something
    latency: gr.LinePlot
    timeline: gr.BarPlot
    throughput: gr.LinePlot


def figure_plots() -> FigurePlots:
    """The three plots, empty until a request finishes, and the switch of what they cover. Built once: updates
    send them data only (figures.py)."""
    with gr.Row(equal_height=True):
        span = gr.Radio(
            list(figures.SPANS),
            value=figures.LATEST_RUN,
            label="Plots show",
            elem_id="figures-span",
            scale=0,
            min_width=260,  # its two choices side by side
        )
        note = gr.Markdown(NO_FIGURES, elem_id="figures-note")
    with gr.Row():
        latency = gr.LinePlot(
            x=figures.LATENCY,
            y=figures.WITHIN,
            title="Latency distribution",
            x_lim=[0, None],
            y_lim=[0, 100],
            label="Latency",
            show_label=False,
            elem_id="latency-plot",
        )
        throughput = gr.LinePlot(
            x=figures.IN_FLIGHT,
            y=figures.THROUGHPUT,
            title="Throughput while in flight",
            x_lim=[0, None],
            y_lim=[0, None],
            label="Throughput",
            show_label=False,
            elem_id="throughput-plot",
        )
    # Full width: up to figures.TIMELINE_REQUESTS bars, and a legend entry per phase.
    timeline = gr.BarPlot(
        x=figures.REQUEST,
        y=figures.SECONDS,
        color=figures.PHASE,
        color_map=figures.PHASE_COLORS,
        colors_in_legend=figures.LEGEND,
        tooltip=[figures.REQUEST_ID, figures.PHASE, figures.LASTED],
        title="Request timeline",
        x_title="requests, in the order they were sent",
        y_title=figures.IN_FLIGHT,
        x_axis_labels_visible=False,  # a number per bar overlaps past a few dozen; the tooltip names each
        label="Timeline",
        show_label=False,
        elem_id="timeline-plot",
    )
    return FigurePlots(span, note, latency, timeline, throughput)


@dataclass(frozen=True, eq=False)
class GenerateLayout:
    """The tab's components, as laid out; the handlers below read and update them."""

    form: dict[str, gr.Component]  # keyed by the fields of handlers.build_spec
    advanced: gr.Accordion  # every field but FIRST_FIELDS, folded as the page opens
    generate: gr.Button
    cancel_all: gr.Button
    status: gr.Markdown
    standing: gr.Markdown
    video: gr.HTML  # the studio's own player: files come through its file route, which checks their owner
    cancel_selected: gr.Button
    details: gr.Markdown
    download: gr.HTML
    running: gr.HTML  # the requests being made, each with its preview
    tiles: gr.Gallery
    counts: gr.Markdown
    stats: gr.Dataframe
    requests: gr.Dataframe
    cancel_id: gr.Textbox  # hidden: the full id of the request a row names
    selection: gr.Markdown  # which request that is, in words
    gallery_note: gr.Markdown  # what to do while there are no videos yet
    cancel_one: gr.Button
    move_up: gr.Button
    move_down: gr.Button
    plots: FigurePlots
    selected: gr.State  # the request selected in the table while it is not finished: its full id
    seen_version: gr.State
    seen_finished: gr.State
    # What the tiles of requests being made and the selected one's preview last showed (their digests): previews
    # are inline images, sent again only when one changed.
    seen_previews: gr.State
    links: FileLinks  # the URLs of the outputs' files, through the studio's file route


def generate_layout(controller: StudioController) -> GenerateLayout:
    """The tab's components, laid out as a studio's: the form on the left (what every run names and the Generate
    button in view as the page opens, the other settings below, foldable), the results on the right (how the run
    stands, the requests being made, the selected video, the finished ones). Below, across: the statistics, the
    requests' table and the figures. A narrow window stacks the two columns."""
    with gr.Row(elem_id="generate-columns"):
        with gr.Column(scale=2, min_width=400, elem_id="generate-form"):
            form = generate_form(controller)
            with gr.Row():
                generate = gr.Button("Generate", variant="primary", elem_id="generate")
                cancel_all = gr.Button("Cancel all", variant="stop", elem_id="cancel-all")
            # Folded as the page opens: the prompt, tier, aspect and Generate button are what a first video needs.
            with gr.Accordion("Advanced settings", open=False, elem_id="advanced") as advanced:
                more_fields(controller, form)
            prompt_examples(controller, form["prompts"])
        with gr.Column(scale=3, min_width=400, elem_id="generate-results"):
            status = gr.Markdown("", elem_id="status")
            standing = gr.Markdown("", elem_id="standing")
            gallery_note = gr.Markdown(NO_VIDEOS, elem_id="gallery-note")
            running = gr.HTML("", elem_id="running")
            video = gr.HTML("", label="Selected video", elem_id="video")
            # A request selected in the table while it is made: its preview forms above, and it can be cancelled.
            cancel_selected = gr.Button(
                "Cancel this request", variant="stop", size="sm", visible=False, elem_id="cancel-selected"
            )
            details = gr.Markdown("", elem_id="details")
            download = gr.HTML("", elem_id="download")
            tiles = gr.Gallery(
                label="Finished, newest first (pick one to play it)",
                visible=False,  # shown with the first video (the line above says what to do until then)
                columns=3,
                height="auto",  # as tall as its tiles, up to page.py's bound
                allow_preview=False,
                object_fit="contain",  # each tile in its video's shape, not cropped to a square
                fit_columns=False,
                elem_id="gallery",
            )
    # Built empty: a component's first value is part of the page every visitor loads.
    counts = gr.Markdown("", elem_id="stats")
    stats = gr.Dataframe(
        tables.stats_table(summarize([])), interactive=False, elem_id="stats-table", label=tables.STATS_LABEL
    )
    requests = gr.Dataframe(
        tables.frame([], tables.REQUEST_COLUMNS),
        interactive=False,
        wrap=True,  # within the page's width (its CSS fits the columns to their words): long notes wrap
        elem_id="requests",
        label="Requests",
    )
    with gr.Row(equal_height=True, elem_id="request-actions"):
        # The request a row names, for the buttons beside it: kept out of sight (the line says which it is); the
        # API's /cancel, /move_up and /move_down take its value as their `request_id`.
        cancel_id = gr.Textbox(label="Request id", elem_id="cancel-id", visible=False)
        selection = gr.Markdown(NO_SELECTION, elem_id="selection")
        cancel_one = gr.Button("Cancel request", elem_id="cancel-one", scale=0, min_width=150, size="sm")
        # A request not yet started: earlier or later in its run (they start in the table's order).
        move_up = gr.Button("Move up", elem_id="move-up", scale=0, min_width=100, size="sm")
        move_down = gr.Button("Move down", elem_id="move-down", scale=0, min_width=100, size="sm")
    return GenerateLayout(
        form=form,
        advanced=advanced,
        generate=generate,
        cancel_all=cancel_all,
        status=status,
        standing=standing,
        video=video,
        cancel_selected=cancel_selected,
        details=details,
        download=download,
        running=running,
        tiles=tiles,
        counts=counts,
        stats=stats,
        requests=requests,
        cancel_id=cancel_id,
        selection=selection,
        gallery_note=gallery_note,
        cancel_one=cancel_one,
        move_up=move_up,
        move_down=move_down,
        plots=figure_plots(),
        selected=gr.State(""),
        seen_version=gr.State(-1),
        seen_finished=gr.State(-1),
        seen_previews=gr.State(("", "")),
        links=FileLinks(controller.store.root),
    )


def no_previews(controller: StudioController) -> str | None:
    """Why the engine in use sends no previews; None where it does."""
    sends = controller.kind.capabilities.previews
    return None if sends else sends.why_not


def visible_view(controller: StudioController, request_id: str, visitor: Visitor | None) -> RequestView | None:
    """The request named, where `visitor` may see it."""
    found = controller.board.find(request_id) if request_id else None
    if found is None or visitor is None or not (visitor.operator or found[1].visitor_id == visitor.id):
        return None
    return found[1] if found[1].id == request_id else None


def selected_area(
    ui: GenerateLayout, controller: StudioController, view: RequestView, request: gr.Request, visitor: Visitor
) -> dict[gr.Component, Any]:
    """The Selected video area for a request: its video once done, its preview while it is made."""
    links = ui.links
    if view.state.finished:
        if view.video_path is None:
            why = view.error or view.state.value
            why = why if visitor.operator else for_visitors(why)
            return {
                ui.video: "",
                ui.details: f"**{view.state.value}** · {markdown_text(tables.short(view.id))} · "
                f"{markdown_text(clipped(view.request.prompt, 80))}: {markdown_text(why)}",
                ui.download: "",
                ui.cancel_selected: gr.update(visible=False),
                ui.selected: "",
            }
        return {
            ui.video: previews.player_box(
                links.player(view.video_path, request, view.request.width / view.request.height),
                view.request.width,
                view.request.height,
            ),
            ui.details: tables.details_markdown(view),
            ui.download: links.download(view.video_path, request, "Download mp4"),
            ui.cancel_selected: gr.update(visible=False),
            ui.selected: "",
        }
    return {
        ui.video: previews.selected_forming(view, no_previews(controller)),
        ui.details: tables.details_markdown(view),
        ui.download: "",
        ui.cancel_selected: gr.update(visible=True),
        ui.selected: view.id,
    }


async def generate_from_form(
    controller: StudioController, visitor: Visitor, image: Any, image_url: str, values: dict[str, Any]
) -> str:
    """The status line of a Generate: the run queued, or why not."""
    try:
        image = handlers.uploaded_image(image, Path(get_upload_folder()))
    except ValueError as exc:
        return f"**cannot generate**: {markdown_text(exc)}"
    return await handlers.submit(controller, {**values, "image": image, "image_url": image_url}, visitor)


def form_field_updates(
    controller: StudioController, ui: GenerateLayout, base_info: dict[str, Any], image: Any, values: dict[str, Any]
) -> list[Any]:
    """Each field of a Generate marked with what is wrong with it, or back to how it was."""
    try:
        image = handlers.uploaded_image(image, Path(get_upload_folder()))
        found = handlers.form_problems(controller, {**values, "image": image})
    except ValueError as exc:
        found = {"image": str(exc)}
    fields = [field_problem_update(component, base_info[name], found.get(name)) for name, component in ui.form.items()]
    # A problem in a folded field opens the fold, so that the outlined field is in view.
    folded = set(found) - set(FIRST_FIELDS)
    return [*fields, gr.Accordion(open=True) if folded else gr.skip()]


def request_row_selected(
    ui: GenerateLayout, controller: StudioController, row: list[Any], request: gr.Request, visitor: Visitor
) -> dict[gr.Component, Any]:
    """A row of the requests' table selected: its full id in the hidden box (the table shows short ones, the box names
    the request for the buttons beside it), the line saying which it is, and the request in the Selected video
    area, where the visitor may see it."""
    if not row:
        return {ui.cancel_id: "", ui.selection: NO_SELECTION}
    full = handlers.full_request_id(controller.board, str(row[0]), None if visitor.operator else visitor)
    view = visible_view(controller, full or "", visitor)
    if view is None:
        return {ui.cancel_id: full or str(row[0]), ui.selection: f"Selected: {markdown_code(row[0])}"}
    line = tables.selection_line(view)
    return {ui.cancel_id: full, ui.selection: line, **selected_area(ui, controller, view, request, visitor)}


def tile_selected(
    ui: GenerateLayout, controller: StudioController, tile: Any, request: gr.Request, visitor: Visitor
) -> dict[gr.Component, Any]:
    """A finished video's tile selected: the video in the Selected video area, where it is the visitor's."""
    found = controller.board.find(gallery.request_id_in(tile) or "")
    if found is None or found[1].video_path is None or not (visitor.operator or found[1].visitor_id == visitor.id):
        return {ui.video: "", ui.details: "no video of yours is selected", ui.download: ""}
    return selected_area(ui, controller, found[1], request, visitor)


@dataclass(frozen=True)
class Shown:
    """What a page showed at its last tick, as its state and components hold it."""

    version: Any
    finished: Any
    show: str | None  # mine or everyone
    status: str | None
    span: str | None
    selected_id: str | None
    previews: Any


def refresh_updates(
    ui: GenerateLayout,
    controller: StudioController,
    access: PageAccess,
    engine_status: gr.Markdown,
    shown: Shown,
    request: gr.Request,
    visitor: Visitor | None,
) -> dict[gr.Component, Any]:
    """What a tick sends: only what changed. Nothing while idle, the table every tick while requests run, the
    gallery and figures when a request finishes. A new `show` (mine / everyone) sends everything again."""
    board = controller.board
    # Addresses, ports and paths of the servers are for operators' eyes only.
    summary = engine_summary(controller, for_operator=visitor is not None and visitor.operator)
    updates: dict[gr.Component, Any] = {engine_status: markdown_text(summary)}
    if visitor is None:  # not signed in: nothing of anyone's
        return updates
    # The status line follows the run it names to its end (a line that names none, such as an error, stays).
    line = tables.run_status_line(board, shown.status or "", visitor)
    if line is not None and line != shown.status:
        updates[ui.status] = line
    scope = access.scope(visitor, shown.show)
    # Read before the board: a change made while this runs shows on the next tick. The version a tick saw is kept
    # with the view it was for, so switching between mine and everyone draws the other view in full; the figures are
    # drawn again when a request ends, a run starts (the latest run is another) or `span` changes.
    span = shown.span if shown.span in figures.SPANS else figures.LATEST_RUN
    current, finished = (board.version, shown.show), (board.finished_count, len(board.runs), shown.show, span)
    active = board.active(scope)
    if current == shown.version and finished == shown.finished and not active:
        return updates
    updates.update(preview_updates(ui, controller, active, shown, request, visitor))
    table = tables.request_table(board, scope)
    updates.update(
        {
            ui.requests: tables.decimals(table),  # one number format per column
            ui.counts: tables.counts_line(board.summary(scope), len(active)),
            ui.standing: tables.standing_line(controller.standing(visitor)),
            ui.seen_version: current,
        }
    )
    if finished != shown.finished:
        links = ui.links
        page_figures = figures.page_figures(board, scope, span)
        tiles = gallery.gallery_items(board.done_newest_first(scope), lambda path: links.url(path, request))
        # Every plot always gets a frame, empty or not: a plot sent none is taken out of the page, and Gradio's
        # plot then reads the size of what is gone (an error in the browser). An empty timeline still names every
        # phase, so that the plot built from it has their colours (figures.timeline_bars).
        updates.update(
            {
                ui.stats: tables.board_stats_table(board, scope),
                ui.tiles: gr.Gallery(value=tiles, visible=bool(tiles)),
                ui.gallery_note: gr.Markdown(visible=not tiles),
                ui.plots.latency: page_figures.latency,
                ui.plots.timeline: page_figures.timeline,
                ui.plots.throughput: page_figures.throughput,
                ui.plots.note: NO_FIGURES if page_figures.empty else FIGURES_NOTE,
                ui.seen_finished: finished,
            }
        )
    return updates


def preview_updates(
    ui: GenerateLayout,
    controller: StudioController,
    active: list[RequestView],
    shown: Shown,
    request: gr.Request,
    visitor: Visitor,
) -> dict[gr.Component, Any]:
    """The tiles of the requests being made and the selected one as it forms (then its video, once), each sent
    only when its digest changed."""
    updates: dict[gr.Component, Any] = {}
    tiles_seen, area_seen = shown.previews if isinstance(shown.previews, (tuple, list)) else ("", "")
    forming = visible_view(controller, shown.selected_id or "", visitor)
    area_digest = area_seen
    if forming is not None:
        area = selected_area(ui, controller, forming, request, visitor)
        area_digest = digest(f"{area[ui.video]}{area[ui.details]}{forming.state}")
        if area_digest != area_seen:
            updates.update(area)
    now = time.time()

    def progress_of(view: RequestView) -> tuple[float, float | None]:
        progress = controller.board.progress(view, now)  # as the table reckons it: counted down between events
        return progress.percent, progress.eta_s

    tiles_html = previews.running_tiles(active, no_previews(controller), progress_of)
    tiles_digest = digest(tiles_html)
    if tiles_digest != tiles_seen:
        updates[ui.running] = tiles_html
    updates[ui.seen_previews] = (tiles_digest, area_digest)
    return updates


def build_generate_tab(
    controller: StudioController, access: PageAccess, engine_status: gr.Markdown, show: gr.Radio
) -> GenerateTab:
    """The tab; every event shows and touches only the work of the visitor asking (an operator's: everyone's
    where their `show` switch says so)."""
    ui = generate_layout(controller)
    wire_generate_tab(ui, controller, access, engine_status, show)
    return GenerateTab(status=ui.status, guardrails=ui.form["guardrails"], form=ui.form, advanced=ui.advanced)


def wire_generate_tab(
    ui: GenerateLayout, controller: StudioController, access: PageAccess, engine_status: gr.Markdown, show: gr.Radio
) -> None:
    """The tab's events, each a thin listener of the functions above: who asks is checked first. The public ones
    (api_name) are the page's API; their parameters are its fields. Long only by its listeners, a few lines each:
    Gradio ties a listener to its component where it is declared, and a listener's signature is its API."""
    board = controller.board

    # preprocess=False: the form's values reach the studio's own checks as sent (a caller's "abc" frames or NaN
    # steps get the field's message, not Gradio's); an image still arrives only from Gradio's upload folder.
    @ui.generate.click(
        inputs_kwargs=ui.form, outputs=ui.status, concurrency_limit=None, api_name="generate", preprocess=False
    )
    async def on_generate(
        request: gr.Request,
        profile: gr.OAuthProfile | None,
        image: Any = None,
        image_url: str = "",
        **values: Any,
    ) -> str:
        # The image's fields named with their defaults: API callers may leave them out.
        return await generate_from_form(controller, access.require(request, profile), image, image_url, values)

    # Each problem also next to its field (the status line says them all): a listener of its own, so that the
    # API's /generate answers as it did.
    base_info = {name: getattr(component, "info", None) for name, component in ui.form.items()}

    @ui.generate.click(
        inputs_kwargs=ui.form, outputs=[*ui.form.values(), ui.advanced], api_visibility="private", preprocess=False
    )
    def on_generate_fields(image: Any = None, **values: Any) -> list[Any]:
        return form_field_updates(controller, ui, base_info, image, values)

    @ui.cancel_all.click(inputs_kwargs={"show": show}, outputs=ui.status, api_name="cancel_all")
    async def on_cancel_all(request: gr.Request, profile: gr.OAuthProfile | None, show: str | None = MINE):
        visitor = access.require(request, profile)
        async for line in handlers.cancel_all(board, visitor, everyone=show == EVERYONE):
            yield line

    @ui.cancel_one.click(inputs_kwargs={"request_id": ui.cancel_id}, outputs=ui.status, api_name="cancel")
    async def on_cancel_one(request: gr.Request, profile: gr.OAuthProfile | None, request_id: str):
        visitor = access.require(request, profile)
        async for line in handlers.cancel_request(board, request_id, visitor):
            yield line

    @ui.move_up.click(inputs_kwargs={"request_id": ui.cancel_id}, outputs=ui.status, api_name="move_up")
    def on_move_up(request: gr.Request, profile: gr.OAuthProfile | None, request_id: str) -> str:
        return handlers.move_request(board, request_id, later=False, by=access.require(request, profile))

    @ui.move_down.click(inputs_kwargs={"request_id": ui.cancel_id}, outputs=ui.status, api_name="move_down")
    def on_move_down(request: gr.Request, profile: gr.OAuthProfile | None, request_id: str) -> str:
        return handlers.move_request(board, request_id, later=True, by=access.require(request, profile))

    area = [ui.video, ui.details, ui.download, ui.cancel_selected, ui.selected]

    @ui.requests.select(outputs=[ui.cancel_id, ui.selection, *area], api_visibility="private")
    def on_request_select(
        evt: gr.SelectData, request: gr.Request, profile: gr.OAuthProfile | None
    ) -> dict[gr.Component, Any]:
        return request_row_selected(ui, controller, evt.row_value or [], request, access.require(request, profile))

    @ui.cancel_selected.click(inputs_kwargs={"request_id": ui.selected}, outputs=ui.status, api_visibility="private")
    async def on_cancel_selected(request: gr.Request, profile: gr.OAuthProfile | None, request_id: str):
        visitor = access.require(request, profile)
        async for line in handlers.cancel_request(board, request_id, visitor):
            yield line

    @ui.tiles.select(outputs=area, api_visibility="private")
    def on_tile_select(
        evt: gr.SelectData, request: gr.Request, profile: gr.OAuthProfile | None
    ) -> dict[gr.Component, Any]:
        return tile_selected(ui, controller, evt.value, request, access.require(request, profile))

    @gr.Timer(REFRESH_S).tick(
        inputs=[ui.seen_version, ui.seen_finished, show, ui.status, ui.plots.span, ui.selected, ui.seen_previews],
        outputs=[
            ui.status,
            ui.running,
            *area,
            engine_status,
            ui.requests,
            ui.counts,
            ui.standing,
            ui.stats,
            ui.tiles,
            ui.gallery_note,
            ui.plots.note,
            ui.plots.latency,
            ui.plots.timeline,
            ui.plots.throughput,
            ui.seen_version,
            ui.seen_finished,
            ui.seen_previews,
        ],
        show_progress="hidden",
        api_visibility="private",
    )
    def refresh(
        version: Any,
        finished_seen: Any,
        shown: str | None,
        status_shown: str | None,
        span: str | None,
        selected_id: str | None,
        previews_seen: Any,
        request: gr.Request,
        profile: gr.OAuthProfile | None,
    ) -> dict[gr.Component, Any]:
        seen = Shown(version, finished_seen, shown, status_shown, span, selected_id, previews_seen)
        return refresh_updates(ui, controller, access, engine_status, seen, request, access.visitor(request, profile))
