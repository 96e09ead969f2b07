"""The Server tab: the managed server's state and log, the endpoints' load (each replica's node, GPUs, state and
queue), the fleet's scaling and its last decisions, start / stop / restart with new settings, and the doctor. The settings form is keyed by StudioSettings' field names, whose descriptions are the
fields' help. Its vLLM-Omni levers show only where the installed vLLM-Omni has their flags (read from its help); the
embedded engine's own levers (step cache, quantization, previews) only where the engine is the embedded one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import gradio as gr
import pandas as pd
from pydantic import ValidationError

from studio.backend.face import (
    LEVER_FLAGS,
    MANAGED_ENGINES,
    Replica,
    RequestState,
    ServerState,
    StudioController,
    VariantError,
    collect_report,
    engine_kind,
    levers_missing,
    scrape,
    server_flags,
    warmup_note,
    warmup_state,
)
from studio.config import EMBEDDED_ENGINE, EngineMode, ServerLevers, SharingSettings, StudioSettings
from studio.ui import handlers
from studio.ui.engine_status import engine_summary
from studio.ui.identity import PageAccess
from studio.ui.markdown import markdown_code, markdown_report, markdown_text

REFRESH_S = 2.0
LOG_LINES = 200
DOCTOR_HINT = "The doctor checks what this machine offers for video generation (Python, torch, GPUs, packages, disk)."
# The doctor's report in words where a key's name says too little.
DOCTOR_LABELS = {
    "vllm_omni_importable": "vllm-omni importable",
    "vllm_executable": "vllm command",
    "vllm_note": "vllm note",
    "outputs_dir": "outputs folder",
    "disk_free_gib": "disk free (GiB)",
    "cuda_available": "GPU usable",
    "memory_total_mib": "memory (MiB)",
    "memory_used_mib": "memory used (MiB)",
    "default_model_present": "default model present",
}


def doctor_text(report: Any) -> str:
    """The doctor's report (doctor.collect_report) as readable lists: label and value, a table per part."""
    if not isinstance(report, Mapping) or not report:
        return DOCTOR_HINT
    return markdown_report(report, DOCTOR_LABELS, header=("checked", "found"))


SCALING_EVENTS_SHOWN = 10
ENDPOINT_COLUMNS = [
    "replica",
    "node",
    "GPUs",
    "endpoint",
    "state",
    "outstanding (studio)",
    "running",
    "waiting",
    "succeeded",
    "last log line",
]


# The levers that name a choice: the first choice of each leaves the server's own default in place.
LEVER_CHOICES = {"cache_backend": "off", "quantization": "off", "diffusion_attention_backend": "auto"}
# Levers with no value of their own by default (the server's applies): a blank control unsets them.
UNSET_WHEN_BLANK = frozenset(name for name in LEVER_FLAGS if StudioSettings.model_fields[name].default is None)


def described(name: str) -> str | None:
    return StudioSettings.model_fields[name].description


def titled(name: str) -> str:
    """A setting's label: its field's title (studio.settings), the same words everywhere the setting shows."""
    return StudioSettings.model_fields[name].title or name.replace("_", " ")


def _is_bool(name: str) -> bool:
    return StudioSettings.model_fields[name].annotation is bool


def _literal_choices(name: str) -> list[str]:
    """The values a setting declared as a Literal takes (empty for any other setting)."""
    return [str(value) for value in get_args(StudioSettings.model_fields[name].annotation)]


def _is_choice(name: str) -> bool:
    """A setting declared as a Literal: one of a few words."""
    return get_origin(StudioSettings.model_fields[name].annotation) is Literal


def _elem_id(name: str) -> str:
    return "server-" + name.replace("_", "-")


def _choice(settings: StudioSettings, name: str) -> gr.Dropdown:
    """A lever naming a choice: the server's default, the usual values (the field's examples), and any other the
    installed server knows, typed in."""
    current = getattr(settings, name) or LEVER_CHOICES[name]
    choices = [LEVER_CHOICES[name], *(StudioSettings.model_fields[name].examples or [])]
    return gr.Dropdown(
        choices if current in choices else [*choices, current],
        value=current,
        allow_custom_value=True,
        label=titled(name),
        info=described(name),
        elem_id=_elem_id(name),
    )


def levers_form(settings: StudioSettings) -> dict[str, gr.Component]:
    """The server levers (studio.settings.ServerLevers, in its order), keyed by StudioSettings' field names: the
    degrees as numbers, the choices as menus, the switches as checkboxes; then how the server starts."""
    form: dict[str, gr.Component] = {}
    levers = list(ServerLevers.model_fields)
    with gr.Row():
        for name in (name for name in levers if name not in LEVER_CHOICES and not _is_bool(name)):
            form[name] = gr.Number(
                value=getattr(settings, name),
                precision=0,
                label=titled(name),
                info=described(name),
                elem_id=_elem_id(name),
            )
    with gr.Row():
        for name in (name for name in levers if name in LEVER_CHOICES):
            form[name] = _choice(settings, name)
    with gr.Row():
        for name in (*(name for name in levers if _is_bool(name)), "guardrails"):
            form[name] = gr.Checkbox(
                value=getattr(settings, name), label=titled(name), info=described(name), elem_id=_elem_id(name)
            )
        form["init_timeout_s"] = gr.Number(
            value=settings.init_timeout_s,
            label=titled("init_timeout_s"),
            info=described("init_timeout_s"),
            elem_id="server-init-timeout",
        )
    return form


def lever_visibility(flags: frozenset[str] | None, why: str = "") -> tuple[dict[str, bool], str]:
    """Which lever controls show, and a note that says why: those whose flag the installed vLLM-Omni's help lists
    (`flags`); every one where the help could not be read (`flags` None, `why` the reason)."""
    if flags is None:
        note = f"All levers shown: the installed vLLM-Omni's flags cannot be read ({why})."
        return dict.fromkeys(LEVER_FLAGS, True), note
    missing = levers_missing(flags)
    shown = {name: name not in missing for name in LEVER_FLAGS}
    if not missing:
        return shown, "Every lever's flag is in the installed vLLM-Omni."
    hidden = ", ".join(f"{titled(name)} ({LEVER_FLAGS[name]})" for name in missing)
    return shown, f"Hidden, the installed vLLM-Omni has no flag for them: {hidden}."


# What every managed server takes, whatever its engine: how long it may take to start, and its guardrails.
START_SETTINGS = ("guardrails", "init_timeout_s")

# The embedded engine's own levers (studio.settings.embedded; the embedded launcher passes them as the engine's
# flags), a column each of what goes together: the step cache and its interval, quantization and the attention kernel,
# previews and their interval. Its device, threads and blocklist say where and how it runs at all, and stay with the
# command line that starts the studio.
ENGINE_LEVER_COLUMNS = EMBEDDED_ENGINE.lever_names()
ENGINE_LEVERS = tuple(name for column in ENGINE_LEVER_COLUMNS for name in column)
# Narrow enough that the three columns stay side by side on a small laptop (1024 px), as one group of levers.
ENGINE_LEVER_MIN_WIDTH = 260
ENGINE_LEVERS_TITLE = "Embedded engine levers"


def reads_engine_levers(settings: StudioSettings) -> bool:
    """Whether the settings' engine is the embedded one, whose servers take ENGINE_LEVERS: the one kind the studio
    starts that does not take vLLM-Omni's serve flags."""
    kind = engine_kind(settings)
    return kind.managed and not kind.reads_serve_levers


def _engine_lever(settings: StudioSettings, name: str) -> gr.Component:
    """One of the embedded engine's levers: its choices as a menu of them alone (the engine takes no other), a
    switch as a checkbox, a number as a number box. Bounds are left to the settings' check, so that a value out of
    them is answered in words beside Restart, as the server levers' are."""
    common: dict[str, Any] = {"label": titled(name), "info": described(name), "elem_id": _elem_id(name)}
    if choices := _literal_choices(name):
        return gr.Dropdown(choices, value=getattr(settings, name), **common)
    if _is_bool(name):
        return gr.Checkbox(value=getattr(settings, name), **common)
    whole = StudioSettings.model_fields[name].annotation is int
    return gr.Number(value=getattr(settings, name), precision=0 if whole else None, **common)


def engine_levers_form(settings: StudioSettings) -> dict[str, gr.Component]:
    """The embedded engine's levers (ENGINE_LEVER_COLUMNS), keyed by StudioSettings' field names."""
    form: dict[str, gr.Component] = {}
    with gr.Row():
        for column in ENGINE_LEVER_COLUMNS:
            with gr.Column(min_width=ENGINE_LEVER_MIN_WIDTH):
                for name in column:
                    form[name] = _engine_lever(settings, name)
    return form


def levers_for_engine(settings: StudioSettings) -> tuple[dict[str, bool], str] | None:
    """Which lever controls show for an engine whose servers do not read vLLM-Omni's serve flags, and why: its
    own degrees (and the start settings, where the studio starts it); None for vLLM-Omni, whose installed
    server's help decides (read_lever_flags)."""
    kind = engine_kind(settings)
    if kind.reads_serve_levers:
        return None
    used = {*kind.levers(), *(START_SETTINGS if kind.managed else ())}
    shown = {name: name in used for name in LEVER_FLAGS}
    if not kind.managed:
        return shown, f"No lever applies: {kind.label} run as they were started, outside the studio."
    own = ", ".join(titled(name) for name in kind.levers())
    return shown, (
        f"The {kind.label} reads {own}; the other levers are vLLM-Omni's serve flags, hidden here: they apply with "
        "the vllm-omni engine."
    )


async def lever_updates(settings: StudioSettings) -> AsyncIterator[list[Any]]:
    """What the levers show for the settings' engine, as the outputs [levers note, embedded engine group, each
    lever of LEVER_FLAGS]: the embedded engine's group only for it; of the server levers, those its servers read
    (vLLM-Omni's: those its installed help lists, said to be under way first, since reading it is slow once)."""
    engine_group = gr.update(visible=reads_engine_levers(settings))
    for_engine = levers_for_engine(settings)
    if for_engine is not None:  # not vLLM-Omni: its levers are the engine's own, and no server's help is read
        shown, note = for_engine
    else:
        yield ["Checking which levers the installed vLLM-Omni has ...", engine_group, *[gr.skip()] * len(LEVER_FLAGS)]
        flags, why = await asyncio.to_thread(read_lever_flags, settings)
        shown, note = lever_visibility(flags, why)
    yield [markdown_text(note), engine_group, *[gr.update(visible=shown[name]) for name in LEVER_FLAGS]]


def read_lever_flags(settings: StudioSettings) -> tuple[frozenset[str] | None, str]:
    """The flags of the vLLM-Omni the settings name (whatever engine runs now: the levers are its), or None and
    why they cannot be read. Slow the first time (the server's help imports its stack), cached after."""
    try:
        return server_flags(settings.model_copy(update={"engine": "vllm-omni"})), ""
    except VariantError as exc:
        return None, str(exc)


def settings_form(
    settings: StudioSettings,
    levers_note: gr.Markdown | None = None,
    groups: dict[str, gr.Accordion] | None = None,
) -> dict[str, gr.Component]:
    """The inputs of the settings a restart applies, laid out, keyed by StudioSettings' field names. `levers_note`
    (built unrendered): where the levers group says which of them the installed vLLM-Omni has. `groups`, where
    given, receives the groups the tab shows or hides by engine, by name ("engine_levers")."""
    form: dict[str, gr.Component] = {}
    with gr.Row():
        form["engine"] = gr.Radio(
            list(get_args(EngineMode)),
            value=settings.engine,
            label=titled("engine"),
            info=described("engine"),
            elem_id="server-engine",
        )
        form["model"] = gr.Textbox(
            value=settings.model, label=titled("model"), info=described("model"), elem_id="server-model"
        )
    with gr.Row():
        form["remote_urls"] = gr.Textbox(
            value=", ".join(settings.remote_urls),
            label=f"{titled('remote_urls')} (comma separated)",
            info=described("remote_urls"),
            elem_id="server-urls",
        )
        form["api_key"] = gr.Textbox(
            value="", type="password", label="API key (kept, never shown)", elem_id="server-key"
        )
    # Shown for the embedded engine alone (lever_updates follows the engine picked); open, and above the server
    # levers: these are the ones that change how it makes videos.
    with gr.Accordion(
        ENGINE_LEVERS_TITLE, open=True, visible=reads_engine_levers(settings), elem_id="server-engine-levers"
    ) as engine_group:
        form.update(engine_levers_form(settings))
    if groups is not None:
        groups["engine_levers"] = engine_group
    # Open where every lever applies (vLLM-Omni); folded where the engine reads only a few of them.
    with gr.Accordion("Server levers", open=engine_kind(settings).reads_serve_levers, elem_id="server-levers"):
        if levers_note is not None:
            levers_note.render()
        form.update(levers_form(settings))
    with gr.Row():
        form["gpus"] = gr.Textbox(value=settings.gpus or "", label=titled("gpus"), info=described("gpus"))
        form["extra_serve_args"] = gr.Textbox(
            value=settings.extra_serve_args, label=titled("extra_serve_args"), info=described("extra_serve_args")
        )
        form["allow_risky_serve_args"] = gr.Checkbox(
            value=settings.allow_risky_serve_args,
            label=titled("allow_risky_serve_args"),
            info=described("allow_risky_serve_args"),
            elem_id="server-allow-risky",
        )
    return form


# Sharing settings whose "none" (no limit, or the default slots) the form shows as 0, since a number box shows
# an unset value as 0 anyway: what it shows is what is in force, and Apply with nothing changed changes nothing.
ZERO_IS_NONE = {
    "in_flight_slots": "0: 8 per server",
    "visitor_max_in_flight": "0: no limit",
    "visitor_max_videos_per_hour": "0: no limit",
}


def sharing_form(settings: StudioSettings) -> dict[str, gr.Component]:
    """How visitors share the servers (studio.settings.SharingSettings, in its order): applied at once, without a
    restart."""
    form: dict[str, gr.Component] = {}
    names = list(SharingSettings.model_fields)
    with gr.Row():
        for name in (name for name in names if not _is_bool(name) and not _is_choice(name)):
            zero = ZERO_IS_NONE.get(name)
            form[name] = gr.Number(
                value=getattr(settings, name) or 0,
                precision=0,
                label=f"{titled(name)} ({zero})" if zero else titled(name),
                info=described(name),
                elem_id="sharing-" + name.replace("_", "-"),
            )
    for name in (name for name in names if _is_choice(name)):  # a choice, such as the visitors' guardrails
        form[name] = gr.Radio(
            _literal_choices(name),
            value=getattr(settings, name),
            label=titled(name),
            info=described(name),
            elem_id="sharing-" + name.replace("_", "-"),
        )
    for name in (name for name in names if _is_bool(name)):
        form[name] = gr.Checkbox(
            value=getattr(settings, name),
            label=titled(name),
            info=described(name),
            elem_id="sharing-cancel-on-close"
            if name == "cancel_unsent_on_close"
            else "sharing-" + name.replace("_", "-"),
        )
    return {name: form[name] for name in names}  # in SharingSettings' order, whatever the layout's


def apply_sharing(controller: StudioController, form: Mapping[str, Any]) -> str:
    values = {
        name: (None if value in (None, "") or (name in ZERO_IS_NONE and value == 0) else value)
        for name, value in form.items()
    }
    for always_limited in ("visitor_max_queued", "max_run_requests"):  # blank keeps the current limit
        if values.get(always_limited) is None:
            values[always_limited] = getattr(controller.settings, always_limited)
    try:
        settings = controller.apply_sharing(**values)
    except (ValidationError, ValueError) as exc:
        return f"**not applied**: {markdown_text(handlers.describe_error(exc))}"
    return "applied: " + "; ".join(sharing_value_text(settings, name) for name in values)


def sharing_value_text(settings: StudioSettings, name: str) -> str:
    """A sharing setting as the form names it, and its value in words (a blank one: what 0 means in the form)."""
    value = getattr(settings, name)
    if value is None and name in ZERO_IS_NONE:
        shown = ZERO_IS_NONE[name].split(": ", 1)[1]
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    else:
        shown = str(value)
    return f"{markdown_text(titled(name))} = {markdown_text(shown)}"


def settings_values(current: StudioSettings, form: Mapping[str, Any]) -> dict[str, Any]:
    """The current settings with the form's applied: a blank number keeps its current value (a blank lever that
    has no value by default, such as the ring degree, goes back to the server's default), a blank key the current
    key (the page never shows it)."""
    values = current.model_dump()
    for name, value in form.items():
        if value not in (None, ""):
            values[name] = value
        elif name in UNSET_WHEN_BLANK:  # a lever left blank: the server's own default
            values[name] = None
    values.update(
        model=str(values["model"]).strip(),
        remote_urls=[u.strip() for u in str(form.get("remote_urls") or "").split(",") if u.strip()],
        gpus=str(form.get("gpus") or "").strip() or None,
        extra_serve_args=form.get("extra_serve_args") or "",
        api_key=form.get("api_key") or current.api_key_value(),
    )
    if values.get("engine") not in MANAGED_ENGINES:  # remote servers are not the studio's to scale
        values.update(replicas_min=None, replicas_max=None)
    return values


def server_state_markdown(controller: StudioController) -> str:
    status = controller.fleet.server_status()
    if status is None:
        text = markdown_text(engine_summary(controller))
    else:
        elapsed = f" for {status.starting_for_s:.0f} s" if status.starting_for_s else ""
        # An exit code says why a server ended on its own; one the studio stopped ended as asked.
        ended = status.exit_code is not None and status.state is not ServerState.STOPPED
        code = f", exit code {status.exit_code}" if ended else ""
        text = f"**{status.state}**{elapsed}{code} · {markdown_text(status.message)} · {markdown_code(status.command)}"
        if status.state is ServerState.CRASHED and not controller.settings.auto_restart:
            text += "\n\n**The server crashed.** Press Restart to start it again, or turn on auto-restart."
    if controller.fleet.auto_restart_note:
        text += f"\n\n{markdown_text(controller.fleet.auto_restart_note)}"
    if controller.start_error:
        text += f"\n\n**start failed**: {markdown_text(controller.start_error)}"
    return text


def scaling_markdown(controller: StudioController) -> str:
    """The fleet's bounds and size, what the autoscaler makes of the queue now, and its last decisions."""
    settings = controller.settings
    if not settings.scales:
        return (
            f"**Scaling**: off, a fleet of {settings.replicas} (--replicas-min and --replicas-max make it follow "
            "its load)"
        )
    servers = controller.fleet.servers
    serving = sum(server.state is ServerState.READY for server in servers)
    text = (
        f"**Scaling**: {settings.replicas_min} to {settings.replicas_max} replicas, now {len(servers)} "
        f"({serving} serving) · one more when the queue per replica stays above {settings.scale_out_queue:g} for "
        f"{settings.scale_out_after_s:g} s · one out when idle for {settings.scale_in_idle_s:g} s"
    )
    loop = controller.fleet.scaling
    if loop is None or not loop.running:
        return text + "\n\nNot watching the load: the fleet is not running."
    if loop.last is not None:
        text += f"\n\nNow: {markdown_text(str(loop.last.action))}, {markdown_text(loop.last.reason)}"
    events = list(loop.events)[-SCALING_EVENTS_SHOWN:][::-1]
    if events:
        rows = "\n".join(
            f"| {time.strftime('%H:%M:%S', time.localtime(event.at))} | {_cell(event.action)} | "
            f"{_cell(event.replica or '')} | {_cell(_one_line(event.reason))} |"
            for event in events
        )
        text += "\n\n| time | decision | replica | why, or what came of it |\n|---|---|---|---|\n" + rows
    else:
        text += "\n\nNo decision yet."
    return text


def _cell(text: str) -> str:
    """Text in a cell of a Markdown table: escaped, and its bars kept from ending the cell."""
    return markdown_text(text).replace("|", "&#124;")


def _one_line(text: str) -> str:
    """A reason of several lines (a server's start failure and its log) as one table cell: its first line and its
    last, where the server said what went wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return text if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"


def replica_label(index: int, server: Replica) -> str:
    """Its position (what Restart replica and Stop replica take), and its name where that says another number (a
    fleet that scaled in keeps its replicas' names)."""
    return str(index) if server.name in (f"replica {index}", "server") else f"{index} ({server.name})"


def replica_node(server: Replica) -> str:
    """The node a replica runs on: Ray's node (address and id) on Ray, else this machine."""
    return getattr(server, "node", None) or "this machine"


async def endpoint_table(controller: StudioController) -> pd.DataFrame:
    """Each server the studio sends work to: for a replica of its fleet, its node, GPUs, state and last log line;
    for each, what the studio has outstanding there (its queue) and what its /metrics says."""
    pool = controller.fleet.pool
    replicas = {
        server.base_url: (index, server) for index, server in enumerate(controller.fleet.servers) if server.port
    }
    urls = [ep.url for ep in pool.endpoints] if pool is not None else list(replicas)
    endpoints = {ep.url: ep for ep in pool.endpoints} if pool is not None else {}
    results, warmups = await asyncio.gather(
        asyncio.gather(*(scrape(url) for url in urls)), asyncio.gather(*(warmup_state(url) for url in urls))
    )
    rows = []
    for url, metrics, warmup in zip(urls, results, warmups, strict=True):
        index, server = replicas.get(url, (None, None))
        endpoint = endpoints.get(url)
        if server is not None and server.state is not ServerState.READY:
            state = str(server.state)
        elif endpoint is None:
            state = "starting"
        elif endpoint.retiring:
            state = "taken out"
        else:
            state = "restarting" if endpoint.restarting else ("up" if endpoint.healthy else "down")
            if state == "up" and (note := warmup_note(warmup)):
                state = f"up, {note}"
        tail = [line for line in server.log_tail(20) if line.strip()] if server is not None else []
        rows.append(
            [
                "–" if index is None or server is None else replica_label(index, server),
                "–" if server is None else replica_node(server),
                ",".join(server.gpus) if server is not None and server.gpus else "–",
                url,
                state,
                endpoint.outstanding if endpoint is not None else 0,
                metrics.running,
                metrics.waiting,
                metrics.succeeded,
                tail[-1][:160] if tail else "",
            ]
        )
    return pd.DataFrame(rows, columns=ENDPOINT_COLUMNS)


async def restart_replica(controller: StudioController, index: Any) -> str:
    try:
        number = int(index)
        controller.fleet.replica(number)
    except (TypeError, ValueError) as exc:
        return (
            f"**cannot restart**: {markdown_text(str(exc) if isinstance(exc, ValueError) else 'give a replica number')}"
        )
    try:
        await asyncio.to_thread(controller.fleet.restart_replica, number)
    except Exception as exc:  # the replica's own log, below, has the server's words
        return f"**replica {number} did not come back**: {markdown_text(str(exc))}"
    return f"replica {number} restarted at {markdown_text(controller.fleet.servers[number].base_url)}"


async def stop_replica(controller: StudioController, index: Any) -> str:
    try:
        number = int(index)
        controller.fleet.replica(number)
    except (TypeError, ValueError) as exc:
        return f"**cannot stop**: {markdown_text(str(exc) if isinstance(exc, ValueError) else 'give a replica number')}"
    await asyncio.to_thread(controller.fleet.stop_replica, number)
    others = sum(server.state is ServerState.READY for server in controller.fleet.servers)
    return f"replica {number} stopped ({others} still serving): Restart replica brings it back"


async def start_server(controller: StudioController) -> str:
    """Start the engine (again after a stop, a crash or a failed start; or attach to the remote servers) and wait
    until it is ready: the answer says how it went."""
    if controller.ready():
        return "already running: " + markdown_text(engine_summary(controller))
    try:
        if controller.starting:  # the first start, or the one after new settings: under way, or about to be
            await controller.wait_until_ready()
        else:  # stopped, crashed or failed: the studio's background start is spent, so start here
            await asyncio.to_thread(controller.start)
    except Exception as exc:  # shown where the button is; the log below has the server's own words
        return f"**start failed**: {markdown_text(str(exc))}"
    if not controller.ready():
        return f"**start failed**: {markdown_text(controller.start_error or engine_summary(controller))}"
    return "started: " + markdown_text(engine_summary(controller))


def stop_question(controller: StudioController) -> str:
    """What Stop asks before it stops: whose work it ends."""
    making = sum(1 for view in controller.board.active(None) if view.state is RequestState.RUNNING)
    ends = f"The {making} request{'s' * (making != 1)} being made now fail" if making else "No request is being made"
    wait = controller.settings.server_wait_s
    return (
        f"**Stop the servers for every visitor?** {ends}; requests sent meanwhile wait up to {wait:g} s for Start "
        "to bring them back."
    )


async def stop_server(controller: StudioController) -> str:
    server = controller.fleet.server
    if server is None:
        return "no managed server to stop" + ("" if controller.managed else " (remote servers run on their own)")
    await asyncio.to_thread(controller.stop)
    return "stopped: Start brings it back"


async def restart_server(controller: StudioController, form: Mapping[str, Any]) -> str:
    """Apply the form's settings and start on them."""
    try:
        new_settings = StudioSettings.model_validate(settings_values(controller.settings, form))
    except ValidationError as exc:
        return f"**settings not applied**: {markdown_text(handlers.describe_error(exc))}"
    await asyncio.to_thread(controller.apply_settings, new_settings)
    return await start_server(controller)


@dataclass(frozen=True, eq=False)
class ServerLayout:
    """The Server tab's components, as laid out; the listeners of wire_server_tab read and update them."""

    state: gr.Markdown
    start: gr.Button
    stop: gr.Button
    restart: gr.Button
    stop_ask: gr.Row  # Stop asks first: it stops the servers for every visitor
    stop_question: gr.Markdown
    stop_confirm: gr.Button
    stop_cancel: gr.Button
    result: gr.Markdown  # what the buttons above did
    levers_note: gr.Markdown
    groups: dict[str, gr.Accordion]
    form: dict[str, gr.Component]  # the settings a restart applies, keyed by StudioSettings' fields
    auto_restart: gr.Checkbox
    endpoints: gr.Dataframe
    scaling: gr.Markdown
    replica: gr.Number
    restart_one: gr.Button
    stop_one: gr.Button
    replica_result: gr.Markdown
    log_tail: gr.Textbox
    sharing: dict[str, gr.Component]
    apply: gr.Button
    sharing_result: gr.Markdown
    doctor: gr.Button
    doctor_report: gr.JSON  # hidden: what the API's /doctor answers, as data
    doctor_text: gr.Markdown  # the same report as readable lists


def server_layout(settings: StudioSettings) -> ServerLayout:
    """The tab's components: the buttons and state, the settings a restart applies, the replicas, the log, how
    visitors share the servers, and the doctor."""
    state = gr.Markdown(elem_id="server-state")
    # Buttons as wide as their words, in a row: the state line above says which one is the next step.
    with gr.Row(elem_id="server-actions"):
        start = gr.Button("Start", elem_id="server-start", scale=0, min_width=120, size="md")
        stop = gr.Button("Stop", variant="stop", elem_id="server-stop", scale=0, min_width=120, size="md")
        restart = gr.Button(
            "Restart (applies the settings below)", elem_id="server-restart", scale=0, min_width=340, size="md"
        )
    with gr.Row(visible=False, elem_id="server-stop-ask") as stop_ask:
        stop_question = gr.Markdown("", elem_id="server-stop-question")
        stop_confirm = gr.Button("Yes, stop them", variant="stop", elem_id="server-stop-confirm", scale=0)
        stop_cancel = gr.Button("Cancel", elem_id="server-stop-cancel", scale=0)
    result = gr.Markdown("", elem_id="server-result")  # what the buttons above did
    levers_note = gr.Markdown("", elem_id="server-levers-note", render=False)
    groups: dict[str, gr.Accordion] = {}
    form = settings_form(settings, levers_note, groups)
    auto_restart = gr.Checkbox(
        value=settings.auto_restart,
        label="Auto-restart a crashed server (and resend what it had not started)",
        elem_id="server-auto-restart",
    )
    endpoints = gr.Dataframe(
        pd.DataFrame(columns=ENDPOINT_COLUMNS),
        interactive=False,
        elem_id="server-metrics",
        label="Replicas and endpoints",
    )
    scaling = gr.Markdown("", elem_id="server-scaling")
    with gr.Row(equal_height=True):
        replica = gr.Number(value=0, precision=0, label="Replica", elem_id="replica-index", scale=0, min_width=140)
        restart_one = gr.Button("Restart replica", elem_id="replica-restart", scale=0, min_width=160)
        stop_one = gr.Button("Stop replica", elem_id="replica-stop", scale=0, min_width=140)
    replica_result = gr.Markdown("", elem_id="replica-result")
    log_tail = gr.Textbox(
        label="Server log (last lines)",
        lines=14,
        max_lines=14,
        interactive=False,
        autoscroll=True,
        elem_id="server-log",
    )
    with gr.Accordion("Sharing: how visitors share the servers (applies at once)", open=False):
        sharing = sharing_form(settings)
        apply = gr.Button("Apply", variant="primary", elem_id="sharing-apply", scale=0, min_width=120)
        sharing_result = gr.Markdown("", elem_id="sharing-result")
    doctor = gr.Button("Run doctor", elem_id="doctor", scale=0, min_width=140)
    doctor_report = gr.JSON(label="Doctor", elem_id="doctor-report", visible=False)
    doctor_text = gr.Markdown(DOCTOR_HINT, elem_id="doctor-text")

    return ServerLayout(
        state=state,
        start=start,
        stop=stop,
        restart=restart,
        stop_ask=stop_ask,
        stop_question=stop_question,
        stop_confirm=stop_confirm,
        stop_cancel=stop_cancel,
        result=result,
        levers_note=levers_note,
        groups=groups,
        form=form,
        auto_restart=auto_restart,
        endpoints=endpoints,
        scaling=scaling,
        replica=replica,
        restart_one=restart_one,
        stop_one=stop_one,
        replica_result=replica_result,
        log_tail=log_tail,
        sharing=sharing,
        apply=apply,
        sharing_result=sharing_result,
        doctor=doctor,
        doctor_report=doctor_report,
        doctor_text=doctor_text,
    )


def log_lines(controller: StudioController, shown: Any) -> str:
    """The last lines of the log of the replica shown (the first where that one is gone)."""
    servers = controller.fleet.servers
    index = int(shown) if isinstance(shown, (int, float)) and 0 <= int(shown) < len(servers) else 0
    return "\n".join(servers[index].log_tail(LOG_LINES) if servers else [])


def build_server_tab(controller: StudioController, access: PageAccess) -> None:
    """The operator's tab: every event here refuses a visitor who is not an operator, and changes nothing."""
    wire_server_tab(server_layout(controller.settings), controller, access)


def wire_server_tab(ui: ServerLayout, controller: StudioController, access: PageAccess) -> None:
    """The tab's events, each a thin listener of the functions above; an operator's alone. Long only by its
    listeners, a few lines each: Gradio ties a listener to its component where it is declared."""
    timer = gr.Timer(REFRESH_S)

    def is_operator(request: gr.Request, profile: gr.OAuthProfile | None) -> bool:
        visitor = access.visitor(request, profile)
        return visitor is not None and visitor.operator

    lever_outputs = [ui.levers_note, ui.groups["engine_levers"], *(ui.form[name] for name in LEVER_FLAGS)]

    @gr.on(triggers=None, outputs=lever_outputs, show_progress="hidden", api_visibility="private")
    async def on_open_levers(request: gr.Request, profile: gr.OAuthProfile | None):
        """On the page's load, an operator's levers keep only what the studio's engine reads (of vLLM-Omni's, what
        the installed vLLM-Omni has)."""
        if not is_operator(request, profile):  # the tab is the operator's; a visitor's page is left as it is
            yield [gr.skip()] * len(lever_outputs)
            return
        async for updates in lever_updates(controller.settings):
            yield updates

    @ui.form["engine"].change(
        inputs_kwargs={"engine": ui.form["engine"]},
        outputs=lever_outputs,
        show_progress="hidden",
        api_visibility="private",
    )
    async def on_engine_choice(request: gr.Request, profile: gr.OAuthProfile | None, engine: str):
        """Another engine picked (applied at Restart): the levers follow it, so the form shows what that engine's
        servers will read. Shows and hides only: the choice itself is applied by Restart, an operator's alone."""
        if not is_operator(request, profile):
            yield [gr.skip()] * len(lever_outputs)
            return
        async for updates in lever_updates(controller.settings.model_copy(update={"engine": engine})):
            yield updates

    @timer.tick(
        inputs=ui.replica, outputs=[ui.state, ui.scaling, ui.log_tail], show_progress="hidden", api_visibility="private"
    )
    def on_tick(shown: Any, request: gr.Request, profile: gr.OAuthProfile | None) -> Any:
        if not is_operator(request, profile):  # the log, state and scaling are the operator's
            return gr.skip(), gr.skip(), gr.skip()
        return server_state_markdown(controller), scaling_markdown(controller), log_lines(controller, shown)

    @ui.restart_one.click(inputs_kwargs={"replica": ui.replica}, outputs=ui.replica_result, api_name="restart_replica")
    async def on_restart_replica(request: gr.Request, profile: gr.OAuthProfile | None, replica: Any):
        access.require_operator(request, profile, action="restart a replica")
        yield f"restarting replica {markdown_text(str(replica))} ..."
        yield await restart_replica(controller, replica)

    @ui.stop_one.click(inputs_kwargs={"replica": ui.replica}, outputs=ui.replica_result, api_name="stop_replica")
    async def on_stop_replica(request: gr.Request, profile: gr.OAuthProfile | None, replica: Any) -> str:
        access.require_operator(request, profile, action="stop a replica")
        return await stop_replica(controller, replica)

    @timer.tick(outputs=ui.endpoints, show_progress="hidden", api_visibility="private")
    async def on_metrics_tick(request: gr.Request, profile: gr.OAuthProfile | None) -> Any:
        if not is_operator(request, profile):
            return gr.skip()
        return await endpoint_table(controller)

    @ui.start.click(outputs=ui.result, api_name="start_server")
    async def on_start(request: gr.Request, profile: gr.OAuthProfile | None):
        access.require_operator(request, profile, action="start the servers")
        yield "starting ..."
        yield await start_server(controller)

    @ui.stop.click(outputs=[ui.stop_ask, ui.stop_question], api_name="ask_stop_server", api_visibility="private")
    def on_ask_stop(request: gr.Request, profile: gr.OAuthProfile | None) -> dict[gr.Component, Any]:
        access.require_operator(request, profile, action="stop the servers")
        return {ui.stop_ask: gr.Row(visible=True), ui.stop_question: stop_question(controller)}

    @ui.stop_confirm.click(outputs=ui.result, api_name="stop_server")
    async def on_stop(request: gr.Request, profile: gr.OAuthProfile | None) -> str:
        access.require_operator(request, profile, action="stop the servers")
        return await stop_server(controller)

    @gr.on(
        [ui.stop_confirm.click, ui.stop_cancel.click],
        outputs=ui.stop_ask,
        api_name="close_stop_question",
        api_visibility="private",
    )
    def on_stop_asked(request: gr.Request, profile: gr.OAuthProfile | None) -> Any:
        access.require_operator(request, profile, action="stop the servers")
        return gr.Row(visible=False)

    @ui.restart.click(inputs_kwargs=ui.form, outputs=ui.result, api_name="restart_server")
    async def on_restart(request: gr.Request, profile: gr.OAuthProfile | None, **values: Any):
        access.require_operator(request, profile, action="restart the servers or change their settings")
        yield "restarting with the new settings ..."
        yield await restart_server(controller, values)

    @ui.auto_restart.change(inputs_kwargs={"on": ui.auto_restart}, api_name="auto_restart", api_visibility="private")
    def on_auto_restart(request: gr.Request, profile: gr.OAuthProfile | None, on: bool) -> None:
        access.require_operator(request, profile, action="change auto-restart")
        controller.set_auto_restart(on)

    @ui.apply.click(inputs_kwargs=ui.sharing, outputs=ui.sharing_result, api_name="sharing")
    def on_apply_sharing(request: gr.Request, profile: gr.OAuthProfile | None, **values: Any) -> str:
        access.require_operator(request, profile, action="change how visitors share the servers")
        return apply_sharing(controller, values)

    @ui.doctor.click(outputs=ui.doctor_report, api_name="doctor")
    def on_doctor(request: gr.Request, profile: gr.OAuthProfile | None) -> dict[str, Any]:
        access.require_operator(request, profile, action="run the doctor")
        return collect_report(controller.settings)

    @ui.doctor_report.change(inputs=ui.doctor_report, outputs=ui.doctor_text, api_visibility="private")
    def on_doctor_report(report: Any) -> str:
        return doctor_text(report)
