"""What the page's tables show, as DataFrames with named columns and rounded numbers (gr.Dataframe renders
them), plus the few lines of text beside them. No gradio here and no actions (handlers.py)."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from studio.backend.face import (
    LatencyParts,
    LatencySummary,
    RequestBoard,
    RequestState,
    RequestView,
    RunFilter,
    Standing,
    StudioController,
    Visitor,
    for_visitors,
    latency_parts,
)
from studio.tiers import line_aspect
from studio.ui.markdown import clipped, markdown_code, markdown_pairs, markdown_text

REQUEST_ROWS = 300
STATE_LABELS = {
    RequestState.WAITING: "waiting in the studio",
    RequestState.QUEUED: "queued at the server",
}
# A latency's parts, as stats.LatencyParts counts them: they add up to it. Queue wait and inference are bounds, not
# readings (studio.backend.clients.base.RequestTimings): the headers say which.
STUDIO_WAIT_COLUMN = "studio wait s"
QUEUE_WAIT_COLUMN = "queue s (at least)"
INFERENCE_COLUMN = "inference s (at most)"
DOWNLOAD_COLUMN = "download s"
OWNER_COLUMN = "owner"  # only where an operator sees everyone's requests
ELAPSED_COLUMN = "elapsed s"  # from pressing Generate; for a request done, its latency
REQUEST_COLUMNS = [
    "id",
    "prompt",
    "tier",
    "state",
    "progress",
    ELAPSED_COLUMN,
    STUDIO_WAIT_COLUMN,
    QUEUE_WAIT_COLUMN,
    INFERENCE_COLUMN,
    DOWNLOAD_COLUMN,
    "ETA s",
    "note",
]
# Everyone's (an operator's view): whose each request is, after its id.
EVERYONE_REQUEST_COLUMNS = [REQUEST_COLUMNS[0], OWNER_COLUMN, *REQUEST_COLUMNS[1:]]
NO_ESTIMATE = "no estimate yet: the first request of this shape (the server reports no progress)"
ESTIMATED = "progress estimated from earlier requests of this shape"
THROUGHPUT_COLUMN = "videos/min while in flight"
STATS_COLUMNS = [
    "figures of",
    "videos",
    "in flight s",
    "p50 s",
    "p90 s",
    "p99 s",
    "max s",
    "mean studio wait s",
    "mean queue s (at least)",
    "mean inference s (at most)",
    "mean download s",
    THROUGHPUT_COLUMN,
]
STATS_LABEL = "Statistics (latency: from pressing Generate to the video in the page)"
LATEST_RUN_ROW, SESSION_ROW = "latest run", "session"
HISTORY_ROWS = 100  # History shows a visitor's latest runs, this many
HISTORY_COLUMNS = ["run", "started", "prompts", "tier", "aspect", "requests", "done", "failed", "cancelled"]
FROM_SENDING_COLUMN = "from sending s (server-side)"
RUN_REQUEST_COLUMNS = [
    "id",
    "prompt",
    "state",
    "latency s",
    STUDIO_WAIT_COLUMN,
    QUEUE_WAIT_COLUMN,
    INFERENCE_COLUMN,
    DOWNLOAD_COLUMN,
    FROM_SENDING_COLUMN,
    "seed",
    "error",
]


def short(request_id: str) -> str:
    return request_id.removeprefix("req_")[:8]


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def decimals(table: pd.DataFrame, digits: int = 2) -> Styler:
    """The table as shown: every fractional number with the same decimals ("0.70" beside "0.31", not "0.7"), whole
    numbers (seeds, counts) as they are, no value blank; the values themselves are kept (sorting, selection)."""
    return table.style.format(precision=digits, na_rep="")


def frame(rows: list[list[Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


# ---- Generate tab ----------------------------------------------------------------------------------
def request_table(board: RequestBoard, scope: Visitor | None = None, now: float | None = None) -> pd.DataFrame:
    """The requests `scope` sees, newest first. None: everyone's, with whose each one is."""
    now = now or time.time()
    rows = []
    for view in board.views(scope)[:REQUEST_ROWS]:
        progress = board.progress(view, now)
        note, percent = view.error or "", f"{progress.percent:.0f}%"
        if view.guardrail_blocked:
            note = "blocked by guardrails: " + note
        elif progress.estimated and not view.state.finished:
            note, percent = (NO_ESTIMATE, "–") if progress.eta_s is None else (ESTIMATED, percent)
        elif view.total_steps and not view.state.finished:  # the server tells its steps (a job's events)
            percent = f"{percent} · step {view.step}/{view.total_steps}"
        note = _answers_when_done_note(view, note)
        if scope is not None and not scope.operator:
            note = for_visitors(note)
        parts = latency_parts(view.timings)
        owner = [board.owner_name(view)] if scope is None else []
        rows.append(
            [
                short(view.id),
                *owner,
                clipped(view.request.prompt, 80),
                view.tier or view.request.size,
                STATE_LABELS.get(view.state, str(view.state)),
                percent,
                round(view.elapsed_s, 1),
                *_rounded_parts(parts),
                rounded(progress.eta_s, 1),
                note[:200],
            ]
        )
    return frame(rows, REQUEST_COLUMNS if scope is not None else EVERYONE_REQUEST_COLUMNS)


def selection_line(view: RequestView) -> str:
    """The request a row of the table names, in words: for the buttons beside the line (cancel, move)."""
    state = STATE_LABELS.get(view.state, view.state.value)
    return (
        f"Selected: {markdown_code(short(view.id))} · {markdown_text(state)} · "
        f"{markdown_text(clipped(view.request.prompt, 60))}"
    )


def _rounded_parts(parts: LatencyParts) -> list[float | None]:
    """Waiting in the studio, queued at the server, inference, download: the order every table gives them in."""
    return [rounded(value) for value in (parts.studio_wait_s, parts.queue_s, parts.inference_s, parts.download_s)]


def _answers_when_done_note(view: RequestView, note: str) -> str:
    """A request of a server that answers only once the video is made (the Cosmos Framework's): the note says what
    it cannot tell (queue wait apart from inference) or do (cancel)."""
    extra = view.limits_note()
    if extra is None:
        return note
    return f"{note}; {extra}" if note else extra


def counts_line(summary: LatencySummary, active: int) -> str:
    return (
        f"**{summary.completed} completed** · {summary.failed} failed · {summary.cancelled} cancelled · "
        f"{active} in flight"
    )


RUN_ID = re.compile(r"run_\d{8}_\d{6}_[0-9a-f]{6}")
STATUS_SEPARATOR = " · "
# How a run stands, as its status line opens: (under way, finished).
RUN_STANDING = ("now: ", "finished: ")
# The order a run's states are told in.
RUN_STATES = (
    RequestState.DONE,
    RequestState.RUNNING,
    RequestState.DOWNLOADING,
    RequestState.QUEUED,
    RequestState.WAITING,
    RequestState.FAILED,
    RequestState.CANCELLED,
)


def run_status_line(board: RequestBoard, shown: str, visitor: Visitor) -> str | None:
    """The status line of the run it names (the one the visitor last queued), as it stands now: it follows the run
    to its end. None where the line names no run of the visitor's (an error, a cancel's answer: kept as it is)."""
    match = RUN_ID.search(shown or "")
    run = next((run for run in reversed(board.runs) if match and run.id == match.group(0)), None)
    if run is None or not (visitor.operator or run.visitor.id == visitor.id):
        return None
    counts = Counter(view.state for view in run.views)
    told = ", ".join(f"{counts[state]} {STATE_LABELS.get(state, state.value)}" for state in RUN_STATES if counts[state])
    # How the run stands leads; the line the submit gave follows (kept from the line shown, whatever led it).
    head, separator, rest = shown.partition(STATUS_SEPARATOR)
    submitted = rest if separator and head.startswith(RUN_STANDING) else shown
    return f"{RUN_STANDING[run.finished]}{told}{STATUS_SEPARATOR}{submitted}"


def standing_line(standing: Standing) -> str:
    """Where the visitor's own work stands; empty when they have none waiting or running."""
    return str(standing) if standing.queued or standing.in_flight else ""


def stats_table(session: LatencySummary, latest_run: LatencySummary | None = None) -> pd.DataFrame:
    """Latency percentiles, the means of its parts, and throughput over the time work was in flight (that window
    beside it). Rows: the latest run's where the session has more than one, the session's, then each tier's."""

    def row(name: str, s: LatencySummary) -> list[Any]:
        figures = (s.latency_p50_s, s.latency_p90_s, s.latency_p99_s, s.latency_max_s)
        means = (s.studio_wait_mean_s, s.queue_wait_mean_s, s.inference_mean_s, s.download_mean_s)
        window = (s.in_flight_s, *figures, *means, s.throughput_per_min)
        return [name, s.completed, *(rounded(value) for value in window)]

    if latest_run is None:
        rows = [row(LATEST_RUN_ROW, session)]
    else:
        rows = [row(LATEST_RUN_ROW, latest_run), row(SESSION_ROW, session)]
    rows += [row(f"{SESSION_ROW}, {tier}", s) for tier, s in session.per_tier.items()]
    return frame(rows, STATS_COLUMNS)


def board_stats_table(board: RequestBoard, scope: Visitor | None = None) -> pd.DataFrame:
    """The statistics of the requests `scope` sees (None: everyone's): their latest run's, and the session's where
    they made more than one."""
    runs = sum(1 for run in board.runs if scope is None or run.visitor.id == scope.id)
    latest = board.summary(scope, latest_run=True) if runs > 1 else None
    return stats_table(board.summary(scope), latest)


# A request's parameters in the form's words (the rest by their names in words); the prompt heads the details, and
# width and height are said by its size.
PARAMETER_LABELS = {
    "size": "size (width x height)",
    "num_frames": "frames",
    "num_inference_steps": "steps",
    "guidance_scale": "guidance",
    "negative_prompt": "negative prompt",
    "input_reference": "image",
    "image_url": "image URL",
    "generate_sound": "sound",
    "extra_params": "engine options",
}
PARAMETERS_LEFT_OUT = ("prompt", "width", "height")


def parameter_pairs(parameters: dict[str, Any]) -> list[tuple[str, Any]]:
    """A request's parameters as (label, value) rows, in the order the request gives them."""
    return [
        (PARAMETER_LABELS.get(key, key.replace("_", " ")), value)
        for key, value in parameters.items()
        if key not in PARAMETERS_LEFT_OUT
    ]


def details_markdown(view: RequestView) -> str:
    params = markdown_pairs(parameter_pairs(view.request.parameters()))
    parts = latency_parts(view.timings)

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f} s"

    return (
        f"**{markdown_text(view.request.prompt[:300])}**\n\n"
        f"latency {seconds(parts.latency_s)} from pressing Generate: "
        f"waiting in the studio {seconds(parts.studio_wait_s)} · queue at least {seconds(parts.queue_s)} · "
        f"inference at most {seconds(parts.inference_s)} · download {seconds(parts.download_s)} "
        f"(at the server's side, from sending: {seconds(parts.server_latency_s)}) · "
        f"seed {view.request.seed} · job {markdown_code(view.job_id) if view.job_id else '–'}\n\n{params}"
    )


# ---- History tab -----------------------------------------------------------------------------------
def run_aspects(spec: dict[str, Any]) -> str:
    """The aspects of a stored run's requests: its own, and those its prompt lines write first (`9:16 | ...`)."""
    aspects = []
    for prompt in spec.get("prompts", []):
        try:
            aspects.append(line_aspect(str(prompt))[0] or spec.get("aspect"))
        except ValueError:  # a run stored before prompt lines could carry their aspect
            aspects.append(spec.get("aspect"))
    return ", ".join(str(a) for a in dict.fromkeys(aspects or [spec.get("aspect")]) if a)


def history_table(
    controller: StudioController, scope: Visitor | None = None, only: RunFilter | None = None
) -> pd.DataFrame:
    """The runs `scope` may see (None: everyone's) that `only` keeps (None: people's runs, no bench), newest first."""
    rows = []
    for run in controller.store.recent_runs(HISTORY_ROWS, scope.id if scope is not None else None, only or RunFilter()):
        spec = run["spec"]
        prompts = spec.get("prompts", [])
        rows.append(
            [
                run["id"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run["created_at"])),
                (clipped(prompts[0], 60) + (f" (+{len(prompts) - 1})" if len(prompts) > 1 else "")) if prompts else "",
                spec.get("tier"),
                run_aspects(spec),
                run["requests"],
                run["done"] or 0,
                run["failed"] or 0,
                run.get("cancelled") or 0,
            ]
        )
    return frame(rows, HISTORY_COLUMNS)


def run_request_table(requests: list[dict[str, Any]]) -> pd.DataFrame:
    """The requests of one run (handlers.run_requests_flat's rows), their latency from pressing Generate and its
    parts (stats.LatencyParts.as_record's keys), and the server-side figure beside it."""
    return frame([_run_request_row(r) for r in requests], RUN_REQUEST_COLUMNS)


def _run_request_row(r: dict[str, Any]) -> list[Any]:
    if "server_latency_s" in r:
        parts = [r.get(key) for key in ("latency_s", "studio_wait_s", "queue_wait_s", "inference_s", "download_s")]
        from_sending = r["server_latency_s"]
    else:
        # A row without the parts (its `latency_s` counts from sending, RequestTimings.latency_s): shown only under
        # the server-side name, never as the latency a person waited.
        parts = [None, None, r.get("queue_wait_s"), r.get("inference_s"), None]
        from_sending = r.get("latency_s")
    return [
        r["id"],
        clipped(r["prompt"], 60),
        r["state"],
        *(rounded(value) for value in (*parts, from_sending)),
        r["seed"],
        r["error"],
    ]
