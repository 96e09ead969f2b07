"""What the page's actions do, a few lines each over StudioController: submit a run, re-run one from history,
export one. The tables and figures they show are tables.py and figures.py; no layout here (the *_tab.py
modules) and no server logic (studio.backend)."""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from pydantic import ValidationError

from studio.backend.controller import StudioController
from studio.backend.spec import MAX_SEED, RunSpec
from studio.tiers import TierError

MAX_UPLOAD_BYTES = 20 * 2**20
UPLOAD_FORMATS = ("BMP", "JPEG", "PNG", "WEBP")  # Pillow's names of the formats an engine reads as a first frame


def describe_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            message = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{field}: {message}" if field and field not in ("prompts",) else message)
        return "; ".join(parts)
    return str(exc)


# ---- Generate --------------------------------------------------------------------------------------
def upload_suffixes() -> list[str]:
    return sorted(suffix for suffix, name in Image.registered_extensions().items() if name in UPLOAD_FORMATS)


def check_upload(path: str | None) -> Path | None:
    """An image for image-to-video: by its name and by what Pillow reads in it, one of UPLOAD_FORMATS, under
    the size limit."""
    if not path:
        return None
    file = Path(path)
    suffixes = upload_suffixes()
    if file.suffix.lower() not in suffixes:
        raise ValueError(f"the upload must be an image ({', '.join(suffixes)}), got {file.name!r}")
    if file.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"the image is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
    try:
        with Image.open(file, formats=UPLOAD_FORMATS) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
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
            f"seed must be a whole number from 0 to {MAX_SEED}, or empty for random; got {text[:40]!r}"
        ) from None


def _given(value: Any) -> bool:
    return value not in (None, "")


def build_spec(form: dict[str, Any], controller: StudioController) -> RunSpec:
    """The Generate form's values (keys: its field names) as a RunSpec, checked for this engine."""
    prompts = [line for line in str(form.get("prompts") or "").splitlines()]
    frames = form.get("frames")
    spec = RunSpec(
        prompts=prompts or [""],
        negative_prompt=(form.get("negative_prompt") or "").strip() or None,
        tier=form["tier"],
        aspect=form["aspect"],
        frames=int(frames) if _given(frames) else controller.default_frames(form["tier"]),
        fps=int(form.get("fps") or 24),
        steps=int(form["steps"]) if _given(form.get("steps")) else None,
        guidance=float(form["guidance"]) if _given(form.get("guidance")) else None,
        seed=parse_seed(form.get("seed")),
        seed_policy=form.get("seed_policy") or "fixed",
        copies=int(form["copies"]) if _given(form.get("copies")) else 1,
        concurrency=int(form["concurrency"]) if _given(form.get("concurrency")) else 1,
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


# ---- History ---------------------------------------------------------------------------------------
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


def _run_spec_record(controller: StudioController, run_id: str) -> dict[str, Any] | None:
    return next((r["spec"] for r in controller.store.recent_runs(10_000) if r["id"] == run_id), None)


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
        spec = _run_spec_record(controller, run_id) or {}
        path.write_text(json.dumps({"run_id": run_id, "spec": spec, "requests": rows}, indent=2))
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=REQUEST_EXPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        path.write_text(buffer.getvalue())
    return path


def rerun(controller: StudioController, run_id: str) -> RunSpec:
    spec = _run_spec_record(controller, run_id)
    if spec is None:
        raise ValueError(f"no run {run_id!r} in history")
    return RunSpec.model_validate(spec)
