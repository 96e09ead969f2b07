"""The Server tab: the managed server's state and log, the endpoints' load, start / stop / restart with new
settings, and the doctor. The settings form is keyed by StudioSettings' field names, whose descriptions are the
fields' help."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Mapping
from typing import Any, get_args

import gradio as gr
import pandas as pd
from pydantic import ValidationError

from studio.backend.controller import StudioController
from studio.backend.server_metrics import scrape
from studio.backend.supervisor import ServerState
from studio.config import EngineMode, StudioSettings
from studio.doctor import collect_report
from studio.ui import handlers

REFRESH_S = 2.0
LOG_LINES = 200
ENDPOINT_COLUMNS = ["endpoint", "state", "outstanding (studio)", "running", "waiting", "succeeded"]


def described(name: str) -> str | None:
    return StudioSettings.model_fields[name].description


def settings_form(settings: StudioSettings) -> dict[str, gr.Component]:
    """The inputs of the settings a restart applies, laid out, keyed by StudioSettings' field names."""
    form: dict[str, gr.Component] = {}
    with gr.Row():
        form["engine"] = gr.Radio(
            list(get_args(EngineMode)),
            value=settings.engine,
            label="Engine",
            info=described("engine"),
            elem_id="server-engine",
        )
        form["model"] = gr.Textbox(value=settings.model, label="Model", info=described("model"), elem_id="server-model")
    with gr.Row():
        form["remote_urls"] = gr.Textbox(
            value=", ".join(settings.remote_urls),
            label="Remote URLs (comma separated)",
            info=described("remote_urls"),
            elem_id="server-urls",
        )
        form["api_key"] = gr.Textbox(
            value="", type="password", label="API key (kept, never shown)", elem_id="server-key"
        )
    with gr.Row():
        for name, label in (
            ("tensor_parallel_size", "Tensor parallel"),
            ("cfg_parallel_size", "CFG parallel"),
            ("ulysses_degree", "Ulysses degree"),
        ):
            form[name] = gr.Number(value=getattr(settings, name), precision=0, label=label, info=described(name))
        form["init_timeout_s"] = gr.Number(
            value=settings.init_timeout_s, label="Init timeout (s)", info=described("init_timeout_s")
        )
    with gr.Row():
        form["guardrails"] = gr.Checkbox(
            value=settings.guardrails, label="Server-wide guardrails", info=described("guardrails")
        )
        form["gpus"] = gr.Textbox(value=settings.gpus or "", label="GPUs (e.g. 0,1,2,3)", info=described("gpus"))
        form["extra_serve_args"] = gr.Textbox(
            value=settings.extra_serve_args, label="Extra serve args", info=described("extra_serve_args")
        )
        form["allow_risky_serve_args"] = gr.Checkbox(
            value=settings.allow_risky_serve_args,
            label="Allow exposure-widening serve args (--host, --allowed-local-media-path)",
            info=described("allow_risky_serve_args"),
            elem_id="server-allow-risky",
        )
    return form


def settings_values(current: StudioSettings, form: Mapping[str, Any]) -> dict[str, Any]:
    """The current settings with the form's applied: a blank number keeps its current value, a blank key the
    current key (the page never shows it)."""
    values = current.model_dump()
    for name, value in form.items():
        if value not in (None, ""):
            values[name] = value
    values.update(
        model=str(values["model"]).strip(),
        remote_urls=[u.strip() for u in str(form.get("remote_urls") or "").split(",") if u.strip()],
        gpus=str(form.get("gpus") or "").strip() or None,
        extra_serve_args=form.get("extra_serve_args") or "",
        api_key=form.get("api_key") or current.api_key_value(),
    )
    return values


def server_state_markdown(controller: StudioController) -> str:
    status = controller.server_status()
    if status is None:
        text = html.escape(controller.engine_summary())
    else:
        elapsed = f" for {status.starting_for_s:.0f} s" if status.starting_for_s else ""
        code = f", exit code {status.exit_code}" if status.exit_code is not None else ""
        text = f"**{status.state}**{elapsed}{code} · {html.escape(status.message)} · `{html.escape(status.command)}`"
        if status.state is ServerState.CRASHED and not controller.settings.auto_restart:
            text += "\n\n**The server crashed.** Press Restart to start it again, or turn on auto-restart."
    if controller.auto_restart_note:
        text += f"\n\n{html.escape(controller.auto_restart_note)}"
    if controller.start_error:
        text += f"\n\n**start failed**: {html.escape(controller.start_error)}"
    return text


async def endpoint_table(controller: StudioController) -> pd.DataFrame:
    """Each endpoint's load: what the studio has outstanding there, and what its /metrics says."""
    pool = controller.pool
    if pool is None:
        return pd.DataFrame(columns=ENDPOINT_COLUMNS)
    results = await asyncio.gather(*(scrape(ep.url) for ep in pool.endpoints))
    rows = [
        [
            ep.url,
            "restarting" if ep.restarting else ("up" if ep.healthy else "down"),
            ep.outstanding,
            metrics.running,
            metrics.waiting,
            metrics.succeeded,
        ]
        for ep, metrics in zip(pool.endpoints, results, strict=True)
    ]
    return pd.DataFrame(rows, columns=ENDPOINT_COLUMNS)


async def start_server(controller: StudioController) -> str:
    """Start the engine (again after a stop, a crash or a failed start; or attach to the remote servers) and wait
    until it is ready: the answer says how it went."""
    if controller.ready():
        return "already running: " + html.escape(controller.engine_summary())
    try:
        if controller.starting:  # the first start, or the one after new settings: under way, or about to be
            await controller.wait_until_ready()
        else:  # stopped, crashed or failed: the studio's background start is spent, so start here
            await asyncio.to_thread(controller.start)
    except Exception as exc:  # shown where the button is; the log below has the server's own words
        return f"**start failed**: {html.escape(str(exc))}"
    if not controller.ready():
        return f"**start failed**: {html.escape(controller.start_error or controller.engine_summary())}"
    return "started: " + html.escape(controller.engine_summary())


async def stop_server(controller: StudioController) -> str:
    server = controller.server
    if server is None:
        return "no managed server to stop" + ("" if controller.managed else " (remote servers run on their own)")
    await asyncio.to_thread(controller.stop)
    code = f" (exit code {server.exit_code})" if server.exit_code is not None else ""
    return f"stopped{code}: Start brings it back"


async def restart_server(controller: StudioController, form: Mapping[str, Any]) -> str:
    """Apply the form's settings and start on them."""
    try:
        new_settings = StudioSettings.model_validate(settings_values(controller.settings, form))
    except ValidationError as exc:
        return f"**settings not applied**: {html.escape(handlers.describe_error(exc))}"
    await asyncio.to_thread(controller.apply_settings, new_settings)
    return await start_server(controller)


def build_server_tab(controller: StudioController) -> None:
    settings = controller.settings
    state = gr.Markdown(elem_id="server-state")
    with gr.Row():
        start = gr.Button("Start", elem_id="server-start")
        stop = gr.Button("Stop", elem_id="server-stop")
        restart = gr.Button("Restart (applies the settings below)", elem_id="server-restart")
    result = gr.Markdown("", elem_id="server-result")  # what the buttons above did
    form = settings_form(settings)
    auto_restart = gr.Checkbox(
        value=settings.auto_restart,
        label="Auto-restart a crashed server (and resend what it had not started)",
        elem_id="server-auto-restart",
    )
    endpoints = gr.Dataframe(
        pd.DataFrame(columns=ENDPOINT_COLUMNS), interactive=False, elem_id="server-metrics", label="Endpoints"
    )
    log_tail = gr.Textbox(
        label="Server log (last lines)",
        lines=14,
        max_lines=14,
        interactive=False,
        autoscroll=True,
        elem_id="server-log",
    )
    doctor = gr.Button("Run doctor", elem_id="doctor")
    doctor_report = gr.JSON(label="Doctor", elem_id="doctor-report")

    timer = gr.Timer(REFRESH_S)

    @timer.tick(outputs=[state, log_tail], show_progress="hidden", api_visibility="private")
    def on_tick() -> tuple[str, str]:
        lines = controller.server.log_tail(LOG_LINES) if controller.server else []
        return server_state_markdown(controller), "\n".join(lines)

    @timer.tick(outputs=endpoints, show_progress="hidden", api_visibility="private")
    async def on_metrics_tick() -> pd.DataFrame:
        return await endpoint_table(controller)

    @start.click(outputs=result, api_name="start_server")
    async def on_start():
        yield "starting ..."
        yield await start_server(controller)

    @stop.click(outputs=result, api_name="stop_server")
    async def on_stop() -> str:
        return await stop_server(controller)

    @restart.click(inputs_kwargs=form, outputs=result, api_name="restart_server")
    async def on_restart(**values: Any):
        yield "restarting with the new settings ..."
        yield await restart_server(controller, values)

    auto_restart.change(controller.set_auto_restart, auto_restart, None, api_visibility="private")
    doctor.click(lambda: collect_report(controller.settings), None, doctor_report, api_name="doctor")
