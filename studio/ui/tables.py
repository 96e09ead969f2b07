"""What the page's tables show, as DataFrames with named columns and rounded numbers (gr.Dataframe renders
them), plus the few lines of text beside them. No gradio here and no actions (handlers.py)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from typing import Any

import pandas as pd

from studio.backend.controller import StudioController
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.fair_share import Standing
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.stats import LatencySummary
from studio.backend.visitors import Visitor
from studio.ui.markdown import markdown_text

REQUEST_ROWS = 300
STATE_LABELS = {
    RequestState.WAITING: "waiting in the studio",
    RequestState.QUEUED: "queued at the server",
}
# Queue wait and inference are bounds, not readings (studio.backend.clients.vllm_omni.RequestTimings): the headers say which.
QUEUE_WAIT_COLUMN = "queue s (at least)"
INFERENCE_COLUMN = "inference s (at most)"
REQUEST_COLUMNS = [
    "id",
    "prompt",
    "tier",
    "state",
    "progress",
    "elapsed s",
    QUEUE_WAIT_COLUMN,
    INFERENCE_COLUMN,
    "ETA s",
    "note",
]
REQUEST_COLUMN_WIDTHS = ["7%", "20%", "6%", "9%", "7%", "7%", "8%", "8%", "6%", "22%"]
NO_ESTIMATE = "no estimate yet: the first request of this shape (the server reports no progress)"
ESTIMATED = "progress estimated from earlier requests of this shape"
STATS_COLUMNS = [
    "requests",
    "p50 s",
    "p90 s",
    "p99 s",
    "max s",
    "mean queue wait s (at least)",
    "mean inference s (at most)",
    "videos/min",
]
HISTORY_COLUMNS = ["run", "started", "prompts", "tier", "requests", "done", "failed"]
RUN_REQUEST_COLUMNS = ["id", "prompt", "state", "latency s", QUEUE_WAIT_COLUMN, INFERENCE_COLUMN, "seed", "error"]


def short(request_id: str) -> str:
    return request_id.removeprefix("req_")[:8]


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def frame(rows: list[list[Any]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


# ---- Generate tab ----------------------------------------------------------------------------------
def request_table(board: RequestBoard, scope: Visitor | None = None, now: float | None = None) -> pd.DataFrame:
    """The requests `scope` sees (None: everyone's), newest first."""
    now = now or time.time()
    rows = []
    for view in board.views(scope)[:REQUEST_ROWS]:
        t = view.timings
        progress = board.progress(view, now)
        note, percent = view.error or "", f"{progress.percent:.0f}%"
        if view.guardrail_blocked:
            note = "blocked by guardrails: " + note
        elif progress.estimated and not view.state.finished:
            note, percent = (NO_ESTIMATE, "–") if progress.eta_s is None else (ESTIMATED, percent)
        note = _answers_when_done_note(view, note)
        rows.append(
            [
                short(view.id),
                view.request.prompt[:80],
                view.tier or view.request.size,
                STATE_LABELS.get(view.state, str(view.state)),
                percent,
                round(view.elapsed_s, 1),
                rounded(t.queue_wait_s),
                rounded(t.inference_s),
                rounded(progress.eta_s, 1),
                note[:200],
            ]
        )
    return frame(rows, REQUEST_COLUMNS)


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
    queued = shown.split(STATUS_SEPARATOR, 1)[0]  # the line the submit gave, then how the run stands
    return f"{queued}{STATUS_SEPARATOR}{'finished: ' if run.finished else 'now: '}{told}"


def standing_line(standing: Standing) -> str:
    """Where the visitor's own work stands; empty when they have none waiting or running."""
    return str(standing) if standing.queued or standing.in_flight else ""


def stats_table(summary: LatencySummary) -> pd.DataFrame:
    """Latency percentiles, mean queue wait and inference, and throughput: all requests, then each tier."""

    def row(name: str, s: LatencySummary) -> list[Any]:
        figures = (s.latency_p50_s, s.latency_p90_s, s.latency_p99_s, s.latency_max_s)
        means = (s.queue_wait_mean_s, s.inference_mean_s, s.throughput_per_min)
        return [name, *(rounded(value) for value in (*figures, *means))]

    rows = [row("all", summary), *(row(tier, s) for tier, s in summary.per_tier.items())]
    return frame(rows, STATS_COLUMNS)


def details_markdown(view: RequestView) -> str:
    params = json.dumps(view.request.parameters(), indent=1)
    t = view.timings

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f} s"

    return (
        f"**{markdown_text(view.request.prompt[:300])}**\n\n"
        f"latency {seconds(t.latency_s)} · queue at least {seconds(t.queue_wait_s)} · "
        f"inference at most {seconds(t.inference_s)} · "
        f"seed {view.request.seed} · job `{markdown_text(view.job_id or '')}`\n\n```json\n{params}\n```"
    )


# ---- History tab -----------------------------------------------------------------------------------
def history_table(controller: StudioController, scope: Visitor | None = None) -> pd.DataFrame:
    """The runs `scope` may see (None: everyone's), newest first."""
    rows = []
    for run in controller.store.recent_runs(100, scope.id if scope is not None else None):
        spec = run["spec"]
        prompts = spec.get("prompts", [])
        rows.append(
            [
                run["id"],
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run["created_at"])),
                (prompts[0][:60] + (f" (+{len(prompts) - 1})" if len(prompts) > 1 else "")) if prompts else "",
                spec.get("tier"),
                run["requests"],
                run["done"] or 0,
                run["failed"] or 0,
            ]
        )
    return frame(rows, HISTORY_COLUMNS)


def run_request_table(requests: list[dict[str, Any]]) -> pd.DataFrame:
    """The requests of one run (handlers.run_requests_flat's rows)."""
    rows = [
        [
            r["id"],
            r["prompt"][:60],
            r["state"],
            *(rounded(r[key]) for key in ("latency_s", "queue_wait_s", "inference_s")),
            r["seed"],
            r["error"],
        ]
        for r in requests
    ]
    return frame(rows, RUN_REQUEST_COLUMNS)
