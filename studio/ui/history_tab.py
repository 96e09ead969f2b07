"""The History tab: past runs from the store, the requests and videos of one, re-run and export."""

from __future__ import annotations

import html
from typing import Any

import gradio as gr
from pydantic import ValidationError

from studio.backend.controller import StudioController
from studio.ui import handlers, tables

REFRESH_S = 2.0


def finished_runs(controller: StudioController) -> int:
    """How many of this studio's runs have ended: the table is read again when that changes."""
    return sum(run.finished for run in controller.board.runs)


def build_history_tab(controller: StudioController) -> None:
    refresh = gr.Button("Refresh", elem_id="history-refresh")
    # A callable value is read again at every page load: the table is current when the page opens.
    history = gr.Dataframe(
        lambda: tables.history_table(controller), interactive=False, elem_id="history", label="Runs, newest first"
    )
    seen_finished = gr.State(lambda: finished_runs(controller))
    run_id = gr.Textbox(label="Run id (select a row)", elem_id="history-run-id")
    with gr.Row():
        rerun = gr.Button("Re-run with the same settings", elem_id="history-rerun")
        export_json = gr.Button("Export JSON", elem_id="history-export-json")
        export_csv = gr.Button("Export CSV", elem_id="history-export-csv")
    export_file = gr.File(label="Export", elem_id="history-export-file", interactive=False)
    status = gr.Markdown("", elem_id="history-status")
    run_requests = gr.Dataframe(
        tables.run_request_table([]), interactive=False, elem_id="history-requests", label="Requests of the run"
    )
    run_videos = gr.Gallery(label="Videos of the run", columns=4, height=300, elem_id="history-gallery")

    refresh.click(lambda: tables.history_table(controller), None, history, api_name="history")

    @gr.Timer(REFRESH_S).tick(
        inputs=seen_finished, outputs=[history, seen_finished], show_progress="hidden", api_visibility="private"
    )
    def on_tick(seen: int) -> dict[gr.Component, Any]:
        finished = finished_runs(controller)
        if finished == seen:
            return {}
        return {history: tables.history_table(controller), seen_finished: finished}

    @history.select(outputs=[run_id, run_requests, run_videos], api_visibility="private")
    def on_select(evt: gr.SelectData) -> dict[gr.Component, Any]:
        row = evt.row_value or []
        if not row:
            return {}
        selected = str(row[0])
        requests = handlers.run_requests_flat(controller, selected)
        videos = [
            (r["video_path"], f"{r['prompt'][:50]} · seed {r['seed']}")
            for r in requests
            if r["state"] == "done" and r["video_path"]
        ]
        return {run_id: selected, run_requests: tables.run_request_table(requests), run_videos: videos}

    @rerun.click(inputs_kwargs={"run_id": run_id}, outputs=status, api_name="rerun")
    async def on_rerun(run_id: str) -> str:
        try:
            spec = handlers.rerun(controller, (run_id or "").strip())
        except (ValueError, ValidationError) as exc:
            return f"**cannot re-run**: {html.escape(handlers.describe_error(exc))}"
        await controller.wait_until_ready()
        run = controller.new_run(spec)
        run.start()
        return f"re-running as {html.escape(run.id)}: see the Generate tab"

    def export(kind: str):
        def on_export(run_id: str) -> dict[gr.Component, Any]:
            try:
                return {export_file: str(handlers.export_run(controller, (run_id or "").strip(), kind)), status: ""}
            except ValueError as exc:
                return {export_file: None, status: f"**cannot export**: {html.escape(str(exc))}"}

        return on_export

    for button, kind in ((export_json, "json"), (export_csv, "csv")):
        button.click(
            export(kind), inputs_kwargs={"run_id": run_id}, outputs=[export_file, status], api_name=f"export_{kind}"
        )
