"""What the page's events do: a few lines each over StudioController, plus the text and rows they show.

No layout here (page.py) and no server logic (studio.backend).
"""

from __future__ import annotations

import csv
import html
import io
import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from studio import plots
from studio.backend.board import RequestBoard
from studio.backend.controller import StudioController
from studio.backend.runs import RequestState, RequestView, RunSpec
from studio.backend.stats import LatencySummary
from studio.tiers import TierError

MAX_UPLOAD_BYTES = 20 * 2**20
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
TABLE_HEADERS = ["id", "prompt", "tier", "state", "progress", "elapsed s", "queue s", "inference s", "ETA s", "note"]
TABLE_ROWS = 300
STATE_LABELS = {
    RequestState.WAITING: "waiting in the studio",
    RequestState.QUEUED: "queued at the server",
}


def describe_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            message = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{field}: {message}" if field and field not in ("prompts",) else message)
        return "; ".join(parts)
    return str(exc)


def short(request_id: str) -> str:
    return request_id.removeprefix("req_")[:8]


# ---- many requests ---------------------------------------------------------------------------------
def check_upload(path: str | None) -> Path | None:
    """An image for image-to-video: an image file, under the size limit."""
    if not path:
        return None
    file = Path(path)
    if file.suffix.lower() not in IMAGE_SUFFIXES:
        raise ValueError(f"the upload must be an image ({', '.join(sorted(IMAGE_SUFFIXES))}), got {file.name!r}")
    if file.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"the image is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(file) as image:
            image.verify()
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{file.name!r} is not a readable image") from exc
    return file


def parse_seed(value: Any) -> int | None:
    text = str(value if value is not None else "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"seed must be a whole number from 0 to {2**32 - 1}, or empty for random; got {text[:40]!r}"
        ) from None


def build_spec(form: dict[str, Any], controller: StudioController) -> RunSpec:
    prompts = [line for line in str(form.get("prompts") or "").splitlines()]
    frames = form.get("frames")
    spec = RunSpec(
        prompts=prompts or [""],
        negative_prompt=(form.get("negative_prompt") or "").strip() or None,
        tier=form["tier"],
        aspect=form["aspect"],
        frames=controller.default_frames(form["tier"]) if frames in (None, "") else int(frames),
        fps=int(form.get("fps") or 24),
        steps=None if form.get("steps") in (None, "") else int(form["steps"]),
        guidance=None if form.get("guidance") in (None, "") else float(form["guidance"]),
        seed=parse_seed(form.get("seed")),
        seed_policy=form.get("seed_policy") or "fixed",
        copies=1 if form.get("copies") in (None, "") else int(form["copies"]),
        concurrency=1 if form.get("concurrency") in (None, "") else int(form["concurrency"]),
        guardrails=bool(form.get("guardrails", True)),
        generate_sound=bool(form.get("sound", False)),
        input_reference=check_upload(form.get("image")),
    )
    spec.shape()
    return spec


async def submit(controller: StudioController, form: dict[str, Any]) -> str:
    """Queue a run; returns the status line. Earlier work keeps running."""
    try:
        spec = build_spec(form, controller)
    except (ValidationError, TierError, ValueError) as exc:
        return f"**cannot generate**: {html.escape(describe_error(exc))}"
    if controller.starting:
        await controller.wait_until_ready()
    try:
        run = controller.new_run(spec)
    except RuntimeError as exc:
        return f"**cannot generate**: {html.escape(str(exc))}"
    run.start()
    count = len(run.views)
    return f"queued {count} request{'s' * (count != 1)} ({html.escape(run.id)}), {spec.concurrency} at a time"


def table_rows(board: RequestBoard, now: float | None = None) -> list[list[Any]]:
    now = now or time.time()
    rows = []
    for view in board.views()[:TABLE_ROWS]:
        t = view.timings
        progress = board.progress(view, now)
        note = view.error or ""
        if view.guardrail_blocked:
            note = "blocked by guardrails: " + note
        elif progress.estimated and not view.state.finished:
            note = "progress estimated from earlier requests of this shape"
        rows.append(
            [
                short(view.id),
                view.request.prompt[:80],
                view.tier or view.request.size,
                STATE_LABELS.get(view.state, str(view.state)),
                f"{progress.percent:.0f}%",
                round(view.elapsed_s, 1),
                None if t.queue_wait_s is None else round(t.queue_wait_s, 2),
                None if t.inference_s is None else round(t.inference_s, 2),
                None if progress.eta_s is None else round(progress.eta_s, 1),
                note[:200],
            ]
        )
    return rows


def _fmt(value: float | None, unit: str = " s") -> str:
    return "–" if value is None else f"{value:.2f}{unit}"


def stats_markdown(summary: LatencySummary, active: int) -> str:
    lines = [
        f"**{summary.completed} completed** · {summary.failed} failed · {summary.cancelled} cancelled · "
        f"{active} in flight",
        "",
        "| | p50 | p90 | p99 | max | mean queue wait | mean inference | throughput |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(name: str, s: LatencySummary) -> str:
        throughput = "–" if s.throughput_per_min is None else f"{s.throughput_per_min:.2f} videos/min"
        return (
            f"| {name} | {_fmt(s.latency_p50_s)} | {_fmt(s.latency_p90_s)} | {_fmt(s.latency_p99_s)} | "
            f"{_fmt(s.latency_max_s)} | {_fmt(s.queue_wait_mean_s)} | {_fmt(s.inference_mean_s)} | {throughput} |"
        )

    lines.append(row("all", summary))
    lines += [row(tier, tier_summary) for tier, tier_summary in summary.per_tier.items()]
    return "\n".join(lines)


def gallery_items(views: list[RequestView], limit: int = 60) -> list[tuple[str, str]]:
    items = []
    for view in views[:limit]:
        if view.video_path is None:
            continue
        latency = view.timings.latency_s or 0
        items.append((str(view.video_path), f"{view.request.prompt[:60]} · seed {view.request.seed} · {latency:.1f} s"))
    return items


def figures(board: RequestBoard) -> tuple[Any, Any, Any]:
    finished = [v for v in board.views() if v.state.finished and v.timings.sent is not None]
    summary = board.summary()
    latencies = [v.timings.latency_s for v in finished if v.state is RequestState.DONE and v.timings.latency_s]
    origin = min((v.timings.created for v in board.views()), default=0.0)
    rows = []
    for view in sorted(finished, key=lambda v: v.timings.sent or 0)[-80:]:
        t = view.timings
        queue, inference = t.queue_wait_s or 0.0, t.inference_s or 0.0
        server_end = t.completed or (view.finished_at or t.sent)
        rows.append(
            plots.TimelineRow(
                label=short(view.id),
                start_s=(t.sent or origin) - origin,
                queue_s=queue,
                inference_s=inference if t.completed else max(0.0, server_end - (t.sent or server_end)),
                other_s=max(0.0, (t.downloaded or server_end) - server_end),
                failed=view.state is not RequestState.DONE,
            )
        )
    return (
        plots.latency_histogram(latencies, summary.latency_p50_s, summary.latency_p90_s),
        plots.request_timeline(rows),
        plots.throughput_over_time(board.throughput_series()),
    )


def details_markdown(view: RequestView) -> str:
    params = json.dumps(view.request.parameters(), indent=1)
    t = view.timings
    return (
        f"**{html.escape(view.request.prompt[:300])}**\n\n"
        f"latency {_fmt(t.latency_s)} · queue {_fmt(t.queue_wait_s)} · inference {_fmt(t.inference_s)} · "
        f"seed {view.request.seed} · job `{html.escape(view.job_id or '')}`\n\n```json\n{params}\n```"
    )


# ---- history ---------------------------------------------------------------------------------------
HISTORY_HEADERS = ["run", "started", "prompts", "tier", "requests", "done", "failed"]


def history_rows(controller: StudioController) -> list[list[Any]]:
    rows = []
    for run in controller.store.recent_runs(100):
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
    return rows


REQUEST_EXPORT_FIELDS = [
    "id",
    "position",
    "prompt",
    "state",
    "job_id",
    "endpoint",
    "error",
    "video_path",
    "latency_s",
    "queue_wait_s",
    "inference_s",
    "seed",
    "size",
    "num_frames",
]


def run_requests_flat(controller: StudioController, run_id: str) -> list[dict[str, Any]]:
    flat = []
    for row in controller.store.run_requests(run_id):
        timings, params = row.get("timings") or {}, row.get("parameters") or {}
        flat.append(
            {
                "id": row["id"],
                "position": row["position"],
                "prompt": row["prompt"],
                "state": row["state"],
                "job_id": row["job_id"],
                "endpoint": row["endpoint"],
                "error": row["error"],
                "video_path": row["video_path"],
                "latency_s": timings.get("latency_s"),
                "queue_wait_s": timings.get("queue_wait_s"),
                "inference_s": timings.get("inference_s"),
                "seed": params.get("seed"),
                "size": f"{params.get('width')}x{params.get('height')}",
                "num_frames": params.get("num_frames"),
            }
        )
    return flat


def export_run(controller: StudioController, run_id: str, kind: str) -> Path:
    """Write a run's requests as JSON or CSV under outputs/exports and return the file."""
    rows = run_requests_flat(controller, run_id)
    if not rows:
        raise ValueError(f"no run {run_id!r} in history")
    folder = controller.store.root / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    safe_id = "".join(ch for ch in run_id if ch.isalnum() or ch in "_-")
    path = folder / f"{safe_id}.{kind}"
    if kind == "json":
        spec = next((r["spec"] for r in controller.store.recent_runs(10_000) if r["id"] == run_id), {})
        path.write_text(json.dumps({"run_id": run_id, "spec": spec, "requests": rows}, indent=2))
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=REQUEST_EXPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        path.write_text(buffer.getvalue())
    return path


def rerun(controller: StudioController, run_id: str) -> RunSpec:
    spec = next((r["spec"] for r in controller.store.recent_runs(10_000) if r["id"] == run_id), None)
    if spec is None:
        raise ValueError(f"no run {run_id!r} in history")
    return RunSpec.model_validate(spec)
