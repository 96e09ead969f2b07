"""The History tab: past runs from the store, the requests and videos of one, re-run and export."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import gradio as gr
from pydantic import ValidationError

from studio.backend.face import RUN_STATES, RunFilter, StudioController, Visitor
from studio.tiers import Tier
from studio.ui import gallery, handlers, previews, tables
from studio.ui.file_links import FileLinks
from studio.ui.identity import MINE, PageAccess
from studio.ui.markdown import clipped, markdown_code, markdown_text

REFRESH_S = 2.0
ANY = "any"
STATE_CHOICES = [("Any state", ANY), *((state.capitalize(), state) for state in RUN_STATES)]
TIER_CHOICES = [("Any tier", ANY), *((tier, tier) for tier in get_args(Tier))]
SEARCH_CHARS = 200  # a search longer than any sensible phrase is cut, not sent to the database whole
# What the tab says where it has nothing to show yet.
NO_RUNS = "No runs yet: make a video in the **Generate** tab and its run is listed here."
NO_MATCH = "No run matches these filters."
PICK_A_RUN = "Pick a run in the table to see its requests and videos, re-run it or export it."


def history_filter(search: Any, state: Any, tier: Any, bench: Any) -> RunFilter:
    """The filter row's values as the store's filter; a value outside the choices (from the API) means any."""
    return RunFilter(
        bench=bench is True,
        tier=tier if tier in get_args(Tier) else None,
        state=state if state in RUN_STATES else None,
        search=str(search or "").strip()[:SEARCH_CHARS],
    )


def finished_runs(controller: StudioController) -> int:
    """How many of this studio's runs have ended: the table is read again when that changes."""
    return controller.board.finished_runs_count


@dataclass(frozen=True, eq=False)
class Reuse:
    """Where History sends a past video's settings: the Generate form, and the tab to show it in."""

    tabs: gr.Tabs
    generate_tab: str  # its id among `tabs`
    form: dict[str, gr.Component]  # the Generate form, keyed by handlers.build_spec's fields
    advanced: gr.Accordion  # the form's fold, opened to show the settings it receives


def played_requests(requests: list[dict[str, Any]], links: FileLinks, request: gr.Request) -> list[dict[str, Any]]:
    """The requests of a run whose video the page can show, in the run's order: the posters, and what each plays."""
    return [r for r in requests if r["state"] == "done" and r["video_path"] and links.url(r["video_path"], request)]


def run_posters(played: list[dict[str, Any]], links: FileLinks, request: gr.Request) -> list[tuple[str, str]]:
    """The posters of a run's videos (each its video where it has none), captioned with prompt and seed."""
    return [
        (links.url(gallery.poster_for(Path(r["video_path"])) or r["video_path"], request) or "", _caption(r))
        for r in played
    ]


def _caption(r: dict[str, Any]) -> str:
    return f"{clipped(r['prompt'], 50)} · seed {r['seed']}"


def runs_note(shown: int, only: RunFilter) -> str:
    """The line above the runs: what to do, where the table is empty or no run is picked yet."""
    if shown:
        return PICK_A_RUN
    filtered = only.search or only.state or only.tier or only.bench
    return NO_MATCH if filtered else NO_RUNS


def run_line(run_id: str, requests: list[dict[str, Any]], videos: int) -> str:
    """The run picked, in words: for the buttons below it (re-run, export)."""
    count = len(requests)
    made = f"{videos} video{'s' * (videos != 1)}" if videos else "no video"
    return f"Run {markdown_code(run_id)} · {count} request{'s' * (count != 1)} · {made}"


def video_details(r: dict[str, Any]) -> str:
    """A past video's settings as a line of words, for the player's caption."""
    parts = [f"{r['size']}", f"{r['num_frames']} frames", f"seed {r['seed']}"]
    if r.get("latency_s") is not None:
        parts.append(f"{r['latency_s']:.1f} s from Generate")
    return f"**{markdown_text(clipped(r['prompt'], 300))}** · " + " · ".join(markdown_text(part) for part in parts)


def played_video(links: FileLinks, played: Any, index: Any, request: gr.Request) -> tuple[str, str]:
    """The player and the settings of the video at `index` of those a run's posters show; empty where none is."""
    if not isinstance(played, list) or not isinstance(index, int) or not 0 <= index < len(played):
        return "", ""
    r = played[index]
    width, height = (int(side) for side in str(r["size"]).split("x")) if "x" in str(r["size"]) else (0, 0)
    player = links.player(Path(r["video_path"]), request, width / height if width and height else None)
    return previews.player_box(player, width, height), video_details(r)


async def rerun_run(controller: StudioController, visitor: Visitor, run_id: str) -> str:
    """A past run of the visitor's (any, for an operator) started again with its settings: the status line."""
    try:
        spec = handlers.rerun(controller, (run_id or "").strip(), None if visitor.operator else visitor)
    except (ValueError, ValidationError) as exc:
        return f"**cannot re-run**: {markdown_text(handlers.describe_error(exc))}"
    await controller.wait_until_ready()
    try:
        run = controller.new_run(spec, visitor)
    except (RuntimeError, ValueError) as exc:  # a limit of the visitor's
        return f"**cannot re-run**: {markdown_text(handlers.describe_error(exc))}"
    run.start()
    return f"re-running as {markdown_text(run.id)}: see the Generate tab"


def build_history_tab(
    controller: StudioController, access: PageAccess, show: gr.Radio, opened: Any, reuse: Reuse | None = None
) -> None:
    """Past runs of the visitor asking (an operator's `show` switch: everyone's). `opened`: the page's load
    event, when the table is first read. `reuse`: the Generate form a past video's settings go to. Long by its
    layout and its listeners, a few lines each: Gradio ties a listener to components declared in the same Blocks, and
    a listener's signature is its API; the work they do is in the functions above and in handlers.py."""
    links = FileLinks(controller.store.root)
    with gr.Row(elem_id="history-filters", equal_height=True):
        search = gr.Textbox(
            placeholder="Search prompts", show_label=False, elem_id="history-search", scale=4, max_length=SEARCH_CHARS
        )
        state = gr.Dropdown(STATE_CHOICES, value=ANY, show_label=False, elem_id="history-state", scale=1, min_width=140)
        tier = gr.Dropdown(TIER_CHOICES, value=ANY, show_label=False, elem_id="history-tier", scale=1, min_width=120)
        bench = gr.Checkbox(False, label="Bench runs", elem_id="history-bench", scale=1, min_width=120)
        refresh = gr.Button("Refresh", elem_id="history-refresh", scale=0, min_width=100, size="md")
    filters = [search, state, tier, bench]
    # Built empty (a first value is part of the page every visitor loads); the page's load fills it.
    history = gr.Dataframe(
        tables.frame([], tables.HISTORY_COLUMNS), interactive=False, elem_id="history", label="Runs, newest first"
    )
    seen = gr.State(None)
    # The run a row names, for the buttons below: kept out of sight (the line says which it is); the API's /rerun
    # and /export_* take its value as their `run_id`.
    run_id = gr.Textbox(label="Run id", elem_id="history-run-id", visible=False)
    with gr.Row(equal_height=True, elem_id="history-actions"):
        picked = gr.Markdown(NO_RUNS, elem_id="history-picked")
        rerun = gr.Button("Re-run with the same settings", elem_id="history-rerun", scale=0, min_width=220, size="sm")
        export_json = gr.Button("Export JSON", elem_id="history-export-json", scale=0, min_width=120, size="sm")
        export_csv = gr.Button("Export CSV", elem_id="history-export-csv", scale=0, min_width=120, size="sm")
    export_file = gr.HTML("", elem_id="history-export-file")  # a link through the studio's file route
    status = gr.Markdown("", elem_id="history-status")
    run_requests = gr.Dataframe(
        tables.run_request_table([]), interactive=False, elem_id="history-requests", label="Requests of the run"
    )
    # Posters (gallery.poster_for), whole: four to a row however few the run made. Picking one plays its video
    # below (no still preview over the others).
    run_videos = gr.Gallery(
        label="Videos of the run (pick one to play it)",
        visible=False,  # shown once a run with videos is picked
        columns=4,
        fit_columns=False,
        height="auto",  # as tall as the posters, up to page.py's bound
        object_fit="contain",
        allow_preview=False,
        elem_id="history-gallery",
    )
    # The video a poster was picked for, played here (its file through the studio's file route), and its settings.
    played_player = gr.HTML("", elem_id="history-video")
    played_details = gr.Markdown("", elem_id="history-video-details")
    played = gr.State([])  # the requests whose posters the gallery shows, in its order
    chosen = gr.State(None)  # the one playing
    with gr.Row(visible=False, elem_id="history-reuse") as reuse_row:
        use_settings = gr.Button("Use these settings", variant="primary", elem_id="history-use-settings", scale=0)
        use_seed = gr.Button("Use this seed", elem_id="history-use-seed", scale=0)

    def scope_of(request: gr.Request, profile: gr.OAuthProfile | None, shown: str | None) -> Visitor | None:
        return access.scope(access.require(request, profile), shown)

    @refresh.click(
        inputs_kwargs={"show": show, "search": search, "state": state, "tier": tier, "bench": bench},
        outputs=history,
        api_name="history",
    )
    def on_refresh(
        request: gr.Request,
        profile: gr.OAuthProfile | None,
        show: str | None = MINE,
        search: str | None = None,
        state: str = ANY,
        tier: str = ANY,
        bench: bool = False,
    ) -> Any:
        only = history_filter(search, state, tier, bench)
        return tables.history_table(controller, scope_of(request, profile, show), only)

    # The table is read when the page opens, when `show` or a filter changes and when one of this studio's runs ends.
    @gr.on(
        [opened, gr.Timer(REFRESH_S).tick, show.change, search.submit, state.change, tier.change, bench.change],
        inputs=[seen, show, *filters, run_id],
        outputs=[history, seen, picked],
        show_progress="hidden",
        api_visibility="private",
    )
    def on_tick(
        seen_before: Any,
        shown: str | None,
        search: str,
        state: str,
        tier: str,
        bench: bool,
        chosen_run: str | None,
        request: gr.Request,
        profile: gr.OAuthProfile | None,
    ) -> dict[gr.Component, Any]:
        visitor = access.visitor(request, profile)
        only = history_filter(search, state, tier, bench)
        now = (finished_runs(controller), shown, only)
        if visitor is None or now == seen_before:
            # Nothing to send: each output told so (an empty answer is an error of Gradio's, at every tick).
            return {history: gr.skip(), seen: gr.skip(), picked: gr.skip()}
        table = tables.history_table(controller, access.scope(visitor, shown), only)
        # The line over the buttons says what to do until a run is picked; it then names the run.
        return {history: table, seen: now, picked: gr.skip() if chosen_run else runs_note(len(table), only)}

    @history.select(
        inputs=show,
        outputs=[run_id, picked, run_requests, run_videos, played, played_player, played_details],
        api_visibility="private",
    )
    def on_select(
        shown: str | None, evt: gr.SelectData, request: gr.Request, profile: gr.OAuthProfile | None
    ) -> dict[gr.Component, Any]:
        row = evt.row_value or []
        if not row:
            return {run_id: gr.skip(), picked: gr.skip(), run_requests: gr.skip(), run_videos: gr.skip()}
        selected = str(row[0])
        requests = handlers.run_requests_flat(controller, selected, scope_of(request, profile, shown))
        shown_videos = played_requests(requests, links, request)
        return {
            run_id: selected,
            picked: run_line(selected, requests, len(shown_videos)),
            run_requests: tables.decimals(tables.run_request_table(requests)),
            run_videos: gr.Gallery(value=run_posters(shown_videos, links, request), visible=bool(shown_videos)),
            played: shown_videos,
            played_player: "",
            played_details: "",
        }

    @run_videos.select(
        inputs=played, outputs=[played_player, played_details, chosen, reuse_row], api_visibility="private"
    )
    def on_play(
        shown: Any, evt: gr.SelectData, request: gr.Request, profile: gr.OAuthProfile | None
    ) -> tuple[str, str, Any, Any]:
        access.require(request, profile)  # `played` holds only what this visitor's selection showed them
        player, details = played_video(links, shown, evt.index, request)
        picked = shown[evt.index] if player else None
        return player, details, picked, gr.Row(visible=reuse is not None and picked is not None)

    if reuse is not None:
        wire_reuse(reuse, controller, access, use_settings, use_seed, run_id, chosen, status)

    @rerun.click(inputs_kwargs={"run_id": run_id}, outputs=status, api_name="rerun")
    async def on_rerun(request: gr.Request, profile: gr.OAuthProfile | None, run_id: str) -> str:
        return await rerun_run(controller, access.require(request, profile), run_id)

    def export(kind: str):
        def on_export(request: gr.Request, profile: gr.OAuthProfile | None, run_id: str) -> dict[gr.Component, Any]:
            visitor = access.require(request, profile)
            scope = None if visitor.operator else visitor
            try:
                path = handlers.export_run(controller, (run_id or "").strip(), kind, scope)
            except ValueError as exc:
                return {export_file: "", status: f"**cannot export**: {markdown_text(str(exc))}"}
            return {export_file: links.download(path, request, f"Download {path.name}"), status: ""}

        return on_export

    for button, kind in ((export_json, "json"), (export_csv, "csv")):
        button.click(
            export(kind), inputs_kwargs={"run_id": run_id}, outputs=[export_file, status], api_name=f"export_{kind}"
        )


def wire_reuse(
    reuse: Reuse,
    controller: StudioController,
    access: PageAccess,
    use_settings: gr.Button,
    use_seed: gr.Button,
    run_id: gr.Textbox,
    chosen: gr.State,
    status: gr.Markdown,
) -> None:
    """The playing video's settings, or its seed alone, into the Generate form, and the Generate tab shown: to
    change one thing and make it again."""
    fields = list(reuse.form)
    seed_fields = ("seed", "seed_policy")

    @use_settings.click(
        inputs=[run_id, chosen],
        outputs=[*reuse.form.values(), reuse.advanced, reuse.tabs, status],
        api_visibility="private",
    )
    def on_use_settings(
        run: str, past: Any, request: gr.Request, profile: gr.OAuthProfile | None
    ) -> dict[gr.Component, Any]:
        visitor = access.require(request, profile)
        if not isinstance(past, dict):
            return {status: "pick a video of the run first"}
        try:
            values = handlers.form_from_past(
                controller, (run or "").strip(), past, None if visitor.operator else visitor
            )
        except (ValueError, ValidationError) as exc:
            return {status: f"**cannot use these settings**: {markdown_text(handlers.describe_error(exc))}"}
        updates: dict[gr.Component, Any] = {reuse.form[name]: values[name] for name in fields if name in values}
        shown = {reuse.advanced: gr.Accordion(open=True), reuse.tabs: gr.Tabs(selected=reuse.generate_tab)}
        return {**updates, **shown, status: ""}

    @use_seed.click(
        inputs=chosen,
        outputs=[*(reuse.form[name] for name in seed_fields), reuse.advanced, reuse.tabs],
        api_visibility="private",
    )
    def on_use_seed(past: Any, request: gr.Request, profile: gr.OAuthProfile | None) -> dict[gr.Component, Any]:
        access.require(request, profile)
        if not isinstance(past, dict) or past.get("seed") is None:
            return {}
        return {
            reuse.form["seed"]: str(past["seed"]),
            reuse.form["seed_policy"]: "fixed",
            reuse.advanced: gr.Accordion(open=True),
            reuse.tabs: gr.Tabs(selected=reuse.generate_tab),
        }
