"""The page's layout and wiring. Stable elem_ids so browser tests can find things; logic lives in handlers."""

from __future__ import annotations

import asyncio
import html
import json
import re
from typing import Any

import gradio as gr
from pydantic import ValidationError

from studio import tiers
from studio.backend.controller import StudioController
from studio.backend.server_metrics import scrape
from studio.backend.supervisor import ServerState
from studio.config import StudioSettings
from studio.doctor import collect_report
from studio.ui import bench_view, handlers

CSS = """
#engine-status { font-size: 0.9em; opacity: 0.85; }
#requests table { font-size: 0.85em; }
"""
EXAMPLES = [
    "a red circle moving left on a white background",
    "two blue squares moving up on black",
    "a yellow triangle moving right on a gray background",
    "a green circle growing on a white background",
]
FORM_FIELDS = [
    "prompts",
    "negative_prompt",
    "tier",
    "aspect",
    "frames",
    "fps",
    "steps",
    "guidance",
    "seed",
    "seed_policy",
    "copies",
    "concurrency",
    "guardrails",
    "sound",
    "image",
]


BENCH_FIELDS = [
    "requests",
    "concurrency",
    "tiers",
    "guardrails",
    "aspect",
    "frames",
    "steps",
    "request_rate",
    "warmup",
    "slo_s",
]


def _request_id_from(value: Any) -> str | None:
    """The request id inside a gallery selection (its video's file name is the request id)."""
    match = re.search(r"(req_[0-9a-f]{12})", json.dumps(value, default=str))
    return match.group(1) if match else None


def build_page(controller: StudioController) -> gr.Blocks:
    settings = controller.settings
    board = controller.board
    with gr.Blocks(title="Omni Studio") as demo:
        gr.Markdown("# Omni Studio")
        engine_status = gr.Markdown(html.escape(controller.engine_summary()), elem_id="engine-status")
        with gr.Tabs():
            with gr.Tab("Generate", id="generate-tab"):
                with gr.Row():
                    with gr.Column(scale=2):
                        prompts = gr.Textbox(
                            label="Prompts (one per line)", lines=3, elem_id="prompt", placeholder=EXAMPLES[0]
                        )
                        gr.Examples(EXAMPLES, inputs=[prompts], label="Examples")
                        negative = gr.Textbox(label="Negative prompt", elem_id="negative")
                        with gr.Row():
                            tier = gr.Radio(
                                list(tiers.TIERS), value=settings.default_tier, label="Tier", elem_id="tier"
                            )
                            aspect = gr.Dropdown(list(tiers.ASPECTS), value="16:9", label="Aspect", elem_id="aspect")
                        with gr.Row():
                            # Limits are checked by the back end, which says what is wrong in the status line.
                            frames = gr.Number(
                                value=controller.default_frames(settings.default_tier),
                                label="Frames",
                                precision=0,
                                elem_id="frames",
                            )
                            fps = gr.Radio(
                                [str(f) for f in tiers.FPS_CHOICES],
                                value=str(tiers.DEFAULT_FPS),
                                label="fps",
                                elem_id="fps",
                            )
                        with gr.Row():
                            steps = gr.Number(
                                value=settings.default_steps or tiers.DEFAULT_STEPS,
                                label="Steps",
                                precision=0,
                                elem_id="steps",
                            )
                            guidance = gr.Number(value=tiers.DEFAULT_GUIDANCE, label="Guidance", elem_id="guidance")
                        with gr.Row():
                            seed = gr.Textbox(value="", label="Seed (empty: random)", elem_id="seed")
                            seed_policy = gr.Radio(
                                ["fixed", "random", "increment"],
                                value="increment",
                                label="Seed per copy",
                                elem_id="seed-policy",
                            )
                        with gr.Row():
                            copies = gr.Number(value=1, label="Copies per prompt", precision=0, elem_id="copies")
                            concurrency = gr.Slider(
                                1, 256, value=4, step=1, label="Concurrency (in flight)", elem_id="concurrency"
                            )
                        with gr.Row():
                            guardrails = gr.Checkbox(value=True, label="Guardrails", elem_id="guardrails")
                            sound = gr.Checkbox(value=False, label="Sound (models that have it)", elem_id="sound")
                        image = gr.Image(
                            type="filepath",
                            sources=["upload"],
                            label="Image for image-to-video",
                            elem_id="image",
                            height=160,
                        )
                        with gr.Row():
                            generate = gr.Button("Generate", variant="primary", elem_id="generate")
                            cancel_all = gr.Button("Cancel all", variant="stop", elem_id="cancel-all")
                        status = gr.Markdown("", elem_id="status")
                    with gr.Column(scale=3):
                        video = gr.Video(
                            label="Selected video", elem_id="video", autoplay=True, loop=True, interactive=False
                        )
                        details = gr.Markdown("", elem_id="details")
                        download = gr.DownloadButton("Download mp4", visible=False, elem_id="download")
                        gallery = gr.Gallery(
                            label="Finished, newest first",
                            columns=3,
                            height=360,
                            allow_preview=False,
                            elem_id="gallery",
                        )
                stats = gr.Markdown(handlers.stats_markdown(board.summary(), 0), elem_id="stats")
                table = gr.Dataframe(
                    headers=handlers.TABLE_HEADERS,
                    value=[],
                    interactive=False,
                    wrap=True,
                    elem_id="requests",
                    label="Requests",
                )
                with gr.Row():
                    cancel_id = gr.Textbox(label="Request id (select a row)", elem_id="cancel-id", scale=3)
                    cancel_one = gr.Button("Cancel request", elem_id="cancel-one", scale=1)
                with gr.Row():
                    latency_plot = gr.Plot(label="Latency", elem_id="latency-plot")
                    timeline_plot = gr.Plot(label="Timeline", elem_id="timeline-plot")
                    throughput_plot = gr.Plot(label="Throughput", elem_id="throughput-plot")

            with gr.Tab("History", id="history-tab"):
                refresh_history = gr.Button("Refresh", elem_id="history-refresh")
                history = gr.Dataframe(
                    headers=handlers.HISTORY_HEADERS,
                    value=handlers.history_rows(controller),
                    interactive=False,
                    elem_id="history",
                    label="Runs, newest first",
                )
                run_id = gr.Textbox(label="Run id (select a row)", elem_id="history-run-id")
                with gr.Row():
                    rerun = gr.Button("Re-run with the same settings", elem_id="history-rerun")
                    export_json = gr.Button("Export JSON", elem_id="history-export-json")
                    export_csv = gr.Button("Export CSV", elem_id="history-export-csv")
                export_file = gr.File(label="Export", elem_id="history-export-file", interactive=False)
                history_status = gr.Markdown("", elem_id="history-status")
                run_requests = gr.Dataframe(interactive=False, elem_id="history-requests", label="Requests of the run")
                run_gallery = gr.Gallery(label="Videos of the run", columns=4, height=300, elem_id="history-gallery")

            with gr.Tab("Bench", id="bench-tab"):
                gr.Markdown(
                    "Measure the endpoints this studio uses (the Server view): every tier x guardrails x "
                    "concurrency cell, closed loop (or open loop at a request rate), warm-up excluded. The same "
                    "engine as `omni-studio bench`. Other work sent meanwhile skews the figures."
                )
                with gr.Row():
                    bench_requests = gr.Number(
                        value=8, precision=0, label="Requests per cell", elem_id="bench-requests"
                    )
                    bench_concurrency = gr.Textbox(
                        value="1,4", label="Concurrency (comma list)", elem_id="bench-concurrency"
                    )
                    bench_tiers = gr.CheckboxGroup(
                        list(tiers.TIERS), value=[settings.default_tier], label="Tiers", elem_id="bench-tiers"
                    )
                    bench_guardrails = gr.CheckboxGroup(
                        ["on", "off"], value=["on"], label="Guardrails", elem_id="bench-guardrails"
                    )
                with gr.Row():
                    bench_aspect = gr.Dropdown(
                        list(tiers.ASPECTS), value="16:9", label="Aspect", elem_id="bench-aspect"
                    )
                    bench_frames = gr.Number(
                        value=controller.default_frames(settings.default_tier),
                        precision=0,
                        label="Frames",
                        elem_id="bench-frames",
                    )
                    bench_steps = gr.Number(
                        value=settings.default_steps or tiers.DEFAULT_STEPS,
                        precision=0,
                        label="Steps",
                        elem_id="bench-steps",
                    )
                    bench_rate = gr.Number(value=0, label="Request rate /s (0: closed loop)", elem_id="bench-rate")
                    bench_warmup = gr.Number(value=1, precision=0, label="Warm-up requests", elem_id="bench-warmup")
                    bench_slo = gr.Number(value=0, label="SLO seconds (0: none)", elem_id="bench-slo")
                bench_run = gr.Button("Run bench", variant="primary", elem_id="bench-run")
                bench_status = gr.Markdown("", elem_id="bench-status")
                bench_table = gr.Dataframe(
                    headers=bench_view.BENCH_HEADERS,
                    value=[],
                    interactive=False,
                    elem_id="bench-summary",
                    label="Cells",
                )
                bench_recommendation = gr.Markdown("", elem_id="bench-recommendation")
                bench_plots = gr.Gallery(label="Plots", columns=3, height=320, elem_id="bench-plots")
                bench_report = gr.File(label="report.json", interactive=False, elem_id="bench-report")

            with gr.Tab("Server", id="server-tab"):
                server_state = gr.Markdown(elem_id="server-state")
                with gr.Row():
                    start_btn = gr.Button("Start", elem_id="server-start")
                    stop_btn = gr.Button("Stop", elem_id="server-stop")
                    restart_btn = gr.Button("Restart (applies the settings below)", elem_id="server-restart")
                with gr.Row():
                    engine_mode = gr.Radio(
                        ["embedded", "vllm-omni", "remote"],
                        value=settings.engine,
                        label="Engine",
                        elem_id="server-engine",
                    )
                    model = gr.Textbox(value=settings.model, label="Model", elem_id="server-model")
                with gr.Row():
                    remote_urls = gr.Textbox(
                        value=", ".join(settings.remote_urls),
                        label="Remote URLs (comma separated)",
                        elem_id="server-urls",
                    )
                    api_key = gr.Textbox(
                        value="", type="password", label="API key (kept, never shown)", elem_id="server-key"
                    )
                with gr.Row():
                    tp = gr.Number(value=settings.tensor_parallel_size, precision=0, label="Tensor parallel")
                    cfg = gr.Number(value=settings.cfg_parallel_size, precision=0, label="CFG parallel")
                    ulysses = gr.Number(value=settings.ulysses_degree, precision=0, label="Ulysses degree")
                    init_timeout = gr.Number(value=settings.init_timeout_s, label="Init timeout (s)")
                with gr.Row():
                    server_guardrails = gr.Checkbox(value=settings.guardrails, label="Server-wide guardrails")
                    auto_restart = gr.Checkbox(
                        value=settings.auto_restart,
                        label="Auto-restart a crashed server (and resend what it had not started)",
                        elem_id="server-auto-restart",
                    )
                    gpus = gr.Textbox(value=settings.gpus or "", label="GPUs (e.g. 0,1,2,3)")
                    extra_args = gr.Textbox(value=settings.extra_serve_args, label="Extra serve args")
                    allow_risky = gr.Checkbox(
                        value=settings.allow_risky_serve_args,
                        label="Allow exposure-widening serve args (--host, --allowed-local-media-path)",
                        elem_id="server-allow-risky",
                    )
                server_metrics = gr.Markdown(elem_id="server-metrics")
                log_tail = gr.Textbox(
                    label="Server log (last lines)",
                    lines=14,
                    max_lines=14,
                    interactive=False,
                    autoscroll=True,
                    elem_id="server-log",
                )
                doctor_btn = gr.Button("Run doctor", elem_id="doctor")
                doctor_out = gr.JSON(label="Doctor", elem_id="doctor-report")

        form_inputs = [
            prompts,
            negative,
            tier,
            aspect,
            frames,
            fps,
            steps,
            guidance,
            seed,
            seed_policy,
            copies,
            concurrency,
            guardrails,
            sound,
            image,
        ]
        last_version = gr.State(-1)
        last_finished = gr.State(-1)

        # ---- generate ----------------------------------------------------------------------------
        async def on_generate(*values: Any) -> str:
            return await handlers.submit(controller, dict(zip(FORM_FIELDS, values, strict=True)))

        generate.click(on_generate, form_inputs, status, concurrency_limit=None, api_name="generate")
        cancel_all.click(lambda: f"cancelling {board.cancel_all()} requests", None, status, api_name="cancel_all")

        def on_cancel_one(request_id: str) -> str:
            return (
                ("cancelling " + html.escape(request_id))
                if board.cancel((request_id or "").strip())
                else (f"no request in flight with id {html.escape(request_id or '')!r}")
            )

        cancel_one.click(on_cancel_one, cancel_id, status, api_name="cancel")

        def on_table_select(evt: gr.SelectData) -> str:
            row = evt.row_value or []
            return str(row[0]) if row else ""

        table.select(on_table_select, None, cancel_id)

        def on_gallery_select(evt: gr.SelectData):
            found = board.find(_request_id_from(evt.value) or "")
            if found is None or found[1].video_path is None:
                return gr.skip(), gr.skip(), gr.skip()
            view = found[1]
            return (
                str(view.video_path),
                handlers.details_markdown(view),
                gr.DownloadButton(value=str(view.video_path), visible=True),
            )

        gallery.select(on_gallery_select, None, [video, details, download])

        def refresh(seen_version: int, seen_finished: int):
            summary_line = html.escape(controller.engine_summary())
            active = board.active()
            if board.version == seen_version and not active:
                return (
                    summary_line,
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                    seen_version,
                    seen_finished,
                )
            finished = len(board.finished_order)
            stats_text = handlers.stats_markdown(board.summary(), len(active))
            rows = handlers.table_rows(board)
            if finished != seen_finished:
                latency_fig, timeline_fig, throughput_fig = handlers.figures(board)
                gallery_value: Any = handlers.gallery_items(board.done_newest_first())
            else:
                latency_fig = timeline_fig = throughput_fig = gallery_value = gr.skip()
            return (
                summary_line,
                rows,
                stats_text,
                gallery_value,
                latency_fig,
                timeline_fig,
                throughput_fig,
                board.version,
                finished,
            )

        timer = gr.Timer(1.0)
        timer.tick(
            refresh,
            [last_version, last_finished],
            [
                engine_status,
                table,
                stats,
                gallery,
                latency_plot,
                timeline_plot,
                throughput_plot,
                last_version,
                last_finished,
            ],
            show_progress="hidden",
            api_visibility="private",
        )

        # ---- history -----------------------------------------------------------------------------
        refresh_history.click(lambda: handlers.history_rows(controller), None, history)

        def on_history_select(evt: gr.SelectData):
            row = evt.row_value or []
            if not row:
                return gr.skip(), gr.skip(), gr.skip()
            selected = str(row[0])
            flat = handlers.run_requests_flat(controller, selected)
            videos = [
                (r["video_path"], f"{r['prompt'][:50]} · seed {r['seed']}")
                for r in flat
                if r["state"] == "done" and r["video_path"]
            ]
            table_value = [[r["id"], r["prompt"][:60], r["state"], r["latency_s"], r["seed"], r["error"]] for r in flat]
            return selected, table_value, videos

        history.select(on_history_select, None, [run_id, run_requests, run_gallery])

        async def on_rerun(selected: str) -> str:
            try:
                spec = handlers.rerun(controller, (selected or "").strip())
            except (ValueError, ValidationError) as exc:
                return f"**cannot re-run**: {html.escape(handlers.describe_error(exc))}"
            await controller.wait_until_ready()
            run = controller.new_run(spec)
            run.start()
            return f"re-running as {html.escape(run.id)}: see the Generate tab"

        rerun.click(on_rerun, run_id, history_status, api_name="rerun")

        def on_export(selected: str, kind: str):
            try:
                return str(handlers.export_run(controller, (selected or "").strip(), kind)), ""
            except ValueError as exc:
                return None, f"**cannot export**: {html.escape(str(exc))}"

        export_json.click(lambda s: on_export(s, "json"), run_id, [export_file, history_status])
        export_csv.click(lambda s: on_export(s, "csv"), run_id, [export_file, history_status])

        # ---- server ------------------------------------------------------------------------------
        def server_view():
            status_obj = controller.server_status()
            if status_obj is None:
                text = html.escape(controller.engine_summary())
            else:
                elapsed = f" for {status_obj.starting_for_s:.0f} s" if status_obj.starting_for_s else ""
                code = f", exit code {status_obj.exit_code}" if status_obj.exit_code is not None else ""
                text = (
                    f"**{status_obj.state}**{elapsed}{code} · {html.escape(status_obj.message)} · "
                    f"`{html.escape(status_obj.command)}`"
                )
                if status_obj.state is ServerState.CRASHED and not controller.settings.auto_restart:
                    text += "\n\n**The server crashed.** Press Restart to start it again, or turn on auto-restart."
            if controller.auto_restart_note:
                text += f"\n\n{html.escape(controller.auto_restart_note)}"
            if controller.start_error:
                text += f"\n\n**start failed**: {html.escape(controller.start_error)}"
            lines = controller.server.log_tail(200) if controller.server else []
            return text, "\n".join(lines)

        async def metrics_view() -> str:
            if controller.pool is None:
                return "no endpoints yet"
            results = await asyncio.gather(*(scrape(ep.url) for ep in controller.pool.endpoints))
            lines = [
                "| endpoint | state | outstanding (studio) | running | waiting | succeeded |",
                "|---|---|---|---|---|---|",
            ]
            for ep, m in zip(controller.pool.endpoints, results, strict=True):

                def show(v: float | None) -> str:
                    return "–" if v is None else f"{v:.0f}"

                state = "restarting" if ep.restarting else ("up" if ep.healthy else "down")
                lines.append(
                    f"| {html.escape(ep.url)} | {state} | {ep.outstanding} | {show(m.running)} | {show(m.waiting)} | "
                    f"{show(m.succeeded)} |"
                )
            return "\n".join(lines)

        server_timer = gr.Timer(2.0)
        server_timer.tick(server_view, None, [server_state, log_tail], show_progress="hidden", api_visibility="private")
        server_timer.tick(metrics_view, None, server_metrics, show_progress="hidden", api_visibility="private")

        async def on_start() -> str:
            controller.start_in_background()
            return "starting"

        async def on_stop() -> str:
            await asyncio.to_thread(controller.stop)
            return "stopped"

        async def on_restart(
            engine_value, model_value, urls, key, tp_v, cfg_v, uly_v, timeout_v, guard_v, gpus_v, extra_v, risky_v
        ) -> str:
            values = settings_values(
                controller.settings,
                engine_value,
                model_value,
                urls,
                key,
                tp_v,
                cfg_v,
                uly_v,
                timeout_v,
                guard_v,
                gpus_v,
                extra_v,
                risky_v,
            )
            try:
                new_settings = StudioSettings.model_validate(values)
            except ValidationError as exc:
                return f"**settings not applied**: {html.escape(handlers.describe_error(exc))}"
            await asyncio.to_thread(controller.apply_settings, new_settings)
            controller.start_in_background()
            return "restarting with the new settings"

        auto_restart.change(controller.set_auto_restart, auto_restart, None, api_visibility="private")

        async def on_bench(*values: Any):
            form = dict(zip(BENCH_FIELDS, values, strict=True))
            async for update in bench_view.run_bench_view(controller, form):
                yield update

        bench_run.click(
            on_bench,
            [
                bench_requests,
                bench_concurrency,
                bench_tiers,
                bench_guardrails,
                bench_aspect,
                bench_frames,
                bench_steps,
                bench_rate,
                bench_warmup,
                bench_slo,
            ],
            [bench_status, bench_table, bench_recommendation, bench_plots, bench_report],
            api_name="bench",
        )
        start_btn.click(on_start, None, status)
        stop_btn.click(on_stop, None, status)
        restart_btn.click(
            on_restart,
            [
                engine_mode,
                model,
                remote_urls,
                api_key,
                tp,
                cfg,
                ulysses,
                init_timeout,
                server_guardrails,
                gpus,
                extra_args,
                allow_risky,
            ],
            status,
        )
        doctor_btn.click(lambda: collect_report(controller.settings), None, doctor_out)
        demo.load(controller.start_in_background, None, None, api_visibility="private")
        demo.load(controller.resume_unfinished, None, None, api_visibility="private")
    return demo


def settings_values(
    current: StudioSettings,
    engine: str,
    model: str,
    urls: str,
    key: str,
    tp: float,
    cfg: float,
    ulysses: float,
    init_timeout: float,
    guardrails: bool,
    gpus: str,
    extra: str,
    allow_risky: bool = False,
) -> dict[str, Any]:
    values = current.model_dump()
    values.update(
        engine=engine,
        model=model.strip(),
        remote_urls=[u.strip() for u in (urls or "").split(",") if u.strip()],
        tensor_parallel_size=int(tp or 1),
        cfg_parallel_size=int(cfg or 1),
        ulysses_degree=int(ulysses or 1),
        init_timeout_s=float(init_timeout or 1800),
        guardrails=bool(guardrails),
        gpus=(gpus or "").strip() or None,
        extra_serve_args=extra or "",
        allow_risky_serve_args=bool(allow_risky),
    )
    values["api_key"] = key if key else current.api_key_value()
    return values


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
