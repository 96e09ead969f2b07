"""What the page's actions do, a few lines each over StudioController: submit a run, re-run one from history,
export one. The tables and figures they show are tables.py and figures.py; no layout here (the *_tab.py
modules) and no server logic (studio.backend)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from studio import tiers
from studio.backend.face import (
    LOCAL_OPERATOR,
    MAX_SEED,
    RequestBoard,
    RequestState,
    RequestView,
    Run,
    RunSpec,
    RunTooLarge,
    StudioController,
    Visitor,
    check_image_file,
    count_range,
    describe,
    field_bounds,
    for_visitors,
    frames_note,
    latency_parts_from_record,
    problems,
)
from studio.backend.face import MAX_UPLOAD_BYTES as MAX_UPLOAD_BYTES
from studio.config import StudioSettings
from studio.csv_cells import write_csv_rows
from studio.tiers import TierError
from studio.ui import tables
from studio.ui.markdown import markdown_text

# The form's words for the fields the models check, where a model's field name is not what the page shows.
FIELD_LABELS = {
    "negative_prompt": "negative prompt",
    "num_inference_steps": "steps",
    "guidance_scale": "guidance",
    "num_frames": "frames",
    "seed_policy": "seed per copy",
    "copies": "copies per prompt",
    "input_reference": "image",
    "image_url": "image URL",
    "generate_sound": "sound",
}


def field_label(field: str) -> str:
    """A field in the page's words: the form's label, a setting's title, else its name in words."""
    if field in FIELD_LABELS:
        return FIELD_LABELS[field]
    if field in StudioSettings.model_fields:
        return StudioSettings.model_fields[field].title or field.replace("_", " ")
    return "" if field == "prompts" else field.replace("_", " ")


def describe_error(exc: Exception, tier: str | None = None) -> str:
    """A checking error in the form's words, in the one voice the CLI speaks too (runs/problems.py): each field by
    its label, what it takes (a range said whole: frames for `tier`), and what was given."""
    if isinstance(exc, ValidationError):
        return describe(exc, field_label, lambda field: count_range(field, tier) or field_bounds(StudioSettings, field))
    return str(exc)


# ---- Generate --------------------------------------------------------------------------------------
NUMBER_FIELDS: dict[str, type[int] | type[float]] = {
    "frames": int,
    "fps": int,
    "steps": int,
    "guidance": float,
    "copies": int,
    "concurrency": int,
}
# The form's field where a model's or the wire's field is checked under another name.
FORM_FIELD_OF = {
    "num_frames": "frames",
    "num_inference_steps": "steps",
    "guidance_scale": "guidance",
    "generate_sound": "sound",
    "input_reference": "image",
    "prompt": "prompts",
    "size": "tier",
    "": "prompts",  # the run as a whole: said where the run starts, its prompts
}


def form_problems(controller: StudioController, form: dict[str, Any]) -> dict[str, str]:
    """Each field of the Generate form that is wrong, with what is wrong in the one voice of describe_error: shown
    next to the field, as the status line says them all. Every field that can be checked alone is; the run as a
    whole is checked once they all pass."""
    found: dict[str, str] = {}
    for name, kind in NUMBER_FIELDS.items():
        try:
            number_field(form, name, kind)
        except ValueError as exc:
            found[name] = str(exc)
    try:
        parse_seed(form.get("seed"))
    except ValueError as exc:
        found["seed"] = str(exc)
    tier, aspect = str(form.get("tier")), str(form.get("aspect") or tiers.DEFAULT_ASPECT)
    if tier not in tiers.TIERS:
        found["tier"] = f"unknown tier {tier!r}; choose one of {', '.join(tiers.TIERS)}"
    elif aspect not in tiers.ASPECTS:
        found["aspect"] = f"unknown aspect {aspect!r}; choose one of {', '.join(tiers.ASPECTS)}"
    if "tier" in found or "aspect" in found:
        return found  # the other fields' ranges depend on them
    # The shape's fields, checked alone: the run's own check reaches them only once every other field passes.
    for name, check in (("frames", lambda n: tiers.normalize_frames(n, tier)), ("fps", tiers.check_fps)):
        value = None if name in found else number_field(form, name, int)
        if value is not None:
            try:
                check(int(value))
            except TierError as exc:
                found[name] = str(exc)
    try:
        # The fields found wrong take their defaults, so that the rest is still checked.
        build_spec({**form, **dict.fromkeys(found)}, controller)
    except ValidationError as exc:
        counts = lambda field: count_range(field, tier) or field_bounds(StudioSettings, field)  # noqa: E731
        for problem in problems(exc, counts):
            label = field_label(problem.field)
            found.setdefault(
                FORM_FIELD_OF.get(problem.field, problem.field), f"{label} {problem.text}" if label else problem.text
            )
            if not problem.field:
                break  # the run as a whole: said once
    except RunTooLarge as exc:
        found["copies"] = str(exc)
    except (TierError, ValueError) as exc:
        text = str(exc)
        named = [name for name in form if text.startswith(f"{field_label(name) or name} ")]
        found.setdefault(named[0] if named else "image" if form.get("image") else "prompts", text)
    return {FORM_FIELD_OF.get(name, name) if name not in form else name: text for name, text in found.items()}


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


def number_field(form: dict[str, Any], name: str, kind: type[int] | type[float], default: Any = None) -> Any:
    """A number of the form (a Number component may send a float, an API caller a string), or `default` when it
    is left empty; anything else is refused in the field's words."""
    value = form.get(name)
    if not _given(value):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number != number or (kind is int and not number.is_integer()):
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{FIELD_LABELS.get(name, name)} must be {what}, got {str(value)[:40]!r}")
    return kind(number)


def build_spec(form: dict[str, Any], controller: StudioController) -> RunSpec:
    """The Generate form's values (keys: its field names) as the RunSpec this engine runs: what the form leaves
    empty takes the engine's defaults (RunSpec.resolved), and the run is checked as a whole (its size, its shape,
    what the wire contract limits, such as the negative prompt's length) without building its requests."""
    prompts = [line for line in str(form.get("prompts") or "").splitlines()]
    tier, aspect = str(form.get("tier")), str(form.get("aspect") or tiers.DEFAULT_ASPECT)
    tiers.size_for(tier, aspect)  # an unknown tier or aspect is named before anything reads it
    spec = RunSpec(
        prompts=prompts or [""],
        negative_prompt=str(form.get("negative_prompt") or "").strip() or None,
        tier=tier,
        aspect=aspect,
        frames=number_field(form, "frames", int),
        fps=number_field(form, "fps", int),
        steps=number_field(form, "steps", int),
        guidance=number_field(form, "guidance", float),
        seed=parse_seed(form.get("seed")),
        seed_policy=form.get("seed_policy") or "fixed",
        copies=number_field(form, "copies", int, 1),
        concurrency=number_field(form, "concurrency", int, 1),
        guardrails=bool(form.get("guardrails", True)),
        generate_sound=bool(form.get("sound", False)),
        input_reference=check_image_file(form.get("image")),
        image_url=str(form.get("image_url") or ""),
    )
    return controller.checked_spec(spec)  # the run builds its requests once


def uploaded_image(value: Any, upload_folder: Path) -> str | None:
    """The image a caller of the page's form uploaded: Gradio's upload (a FileData, or its path) in Gradio's upload
    folder, never a path of the caller's choosing elsewhere. ValueError saying what to do otherwise."""
    if value in (None, ""):
        return None
    path = value.get("path") if isinstance(value, dict) else value
    if not isinstance(path, str) or not path.strip():
        raise ValueError("image: send an uploaded file (gradio_client: handle_file(path)), or leave it empty")
    try:
        inside = Path(path).resolve().is_relative_to(Path(upload_folder).resolve())
    except (OSError, RuntimeError, ValueError):
        inside = False
    if not inside:
        raise ValueError("image: only a file uploaded with the form is taken (gradio_client: handle_file(path))")
    return path


UPLOADS_DIR = "uploads"


def keep_upload(image: Path, outputs_root: Path) -> Path:
    """A copy of the run's image in the outputs folder (named by its content, written once), so that the run does
    not depend on Gradio's upload folder, which is cleaned hourly. The studio's file route serves none of them."""
    digest = hashlib.sha256(image.read_bytes()).hexdigest()[:32]
    kept = Path(outputs_root) / UPLOADS_DIR / f"{digest}{image.suffix.lower()}"
    if not kept.is_file():
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f".{kept.name}.{os.getpid()}")
        shutil.copyfile(image, partial)
        partial.replace(kept)
    return kept


@dataclass(frozen=True)
class Submitted:
    """What a submit came to: the run it queued, or why none (plain text); the page shows `status`, the API the
    run's record."""

    run: Run | None
    refusal: str | None = None
    note: str | None = None  # a value the run changed, said (frames rounded to 4k+1)

    @property
    def status(self) -> str:
        """The page's status line (Markdown)."""
        if self.run is None:
            return f"**cannot generate**: {markdown_text(self.refusal or '')}"
        count = len(self.run.views)
        queued = (
            f"queued {count} request{'s' * (count != 1)} ({markdown_text(self.run.id)}), "
            f"{self.run.spec.concurrency} at a time"
        )
        return f"{queued}; {markdown_text(self.note)}" if self.note else queued  # kept as the line follows the run


async def submit_run(
    controller: StudioController, form: dict[str, Any], visitor: Visitor = LOCAL_OPERATOR
) -> Submitted:
    """Queue a run of the visitor's (started: earlier work keeps running), or say why not."""
    try:
        spec = build_spec(form, controller)
    except (ValidationError, TierError, ValueError, RunTooLarge) as exc:
        # Every field's problem, as the fields show them; the first one found where they name none.
        found = form_problems(controller, form)
        return Submitted(None, "; ".join(found.values()) or describe_error(exc, str(form.get("tier") or "")))
    if spec.input_reference is not None:
        try:
            spec = spec.model_copy(update={"input_reference": keep_upload(spec.input_reference, controller.store.root)})
        except OSError as exc:
            return Submitted(None, f"the image cannot be kept in the outputs folder ({exc.strerror or exc})")
    # The engine of now (the Server tab may have changed it since the page was built): an image it cannot take
    # is refused here, before anything is sent.
    refusal = spec.image_refusal(controller.settings.engine)
    if refusal is not None:
        return Submitted(None, refusal)
    # A visitor's image URL that points inside the servers' network is refused before anything is sent (it
    # resolves the host: off the event loop). Operators choose the servers and what they reach: theirs pass.
    private_ok = visitor.operator or controller.settings.allow_private_image_urls
    refusal = await asyncio.to_thread(spec.image_url_refusal, private_ok)
    if refusal is not None:
        return Submitted(None, f"{field_label('image_url')} {refusal}")
    if controller.starting:
        await controller.wait_until_ready()
    try:
        run = controller.new_run(spec, visitor)
    except (RuntimeError, ValueError) as exc:  # a ValidationError is a ValueError; a limit a RuntimeError
        return Submitted(None, describe_error(exc))
    run.start()
    # Said, never done silently: frames rounded to what the model makes; prompts the small model cannot draw; the
    # guardrail kept on where a visitor asked it off.
    said = (frames_note(spec.frames, spec.tier), *controller.prompt_hints(spec.prompts), spec.guardrails_note(run.spec))
    notes = [note for note in said if note]
    return Submitted(run, note="; ".join(notes) or None)


async def submit(controller: StudioController, form: dict[str, Any], visitor: Visitor = LOCAL_OPERATOR) -> str:
    """Queue a run of the visitor's; returns the status line. Earlier work keeps running."""
    return (await submit_run(controller, form, visitor)).status


# ---- Cancel ----------------------------------------------------------------------------------------
CANCEL_WAIT_S = 30.0  # how long the status line follows cancelled requests to their end
CANCEL_POLL_S = 0.1


def full_request_id(board: RequestBoard, shown: str, scope: Visitor | None = None) -> str | None:
    """The request a table row or the id box names, among those `scope` sees (None: everyone's): its full id, or
    the short one the table shows."""
    shown = (shown or "").strip()
    if not shown:
        return None
    return next((view.id for view in board.views(scope) if shown in (view.id, tables.short(view.id))), None)


def _plural(count: int) -> str:
    return f"{count} request{'s' * (count != 1)}"


async def _until_finished(views: list[RequestView]) -> None:
    """Until the views end (their servers confirm the cancel), or CANCEL_WAIT_S."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    while any(not view.state.finished for view in views) and time.monotonic() < deadline:
        await asyncio.sleep(CANCEL_POLL_S)


def _cancel_outcome(views: list[RequestView]) -> str:
    cancelled = sum(view.state is RequestState.CANCELLED for view in views)
    done = sum(view.state is RequestState.DONE for view in views)
    stopping = sum(not view.state.finished for view in views)
    parts = [f"cancelled {_plural(cancelled)}"]
    if done:
        parts.append(f"{done} finished first")
    if stopping:
        parts.append(f"{stopping} still stopping")
    return ", ".join(parts)


async def cancel_all(board: RequestBoard, by: Visitor = LOCAL_OPERATOR, everyone: bool = False) -> AsyncIterator[str]:
    """Cancel what the visitor has in flight (an operator who asks: everyone's): the status line says so, then
    what came of it."""
    targets = board.active(None if everyone and by.operator else by)
    count = board.cancel_all(by=by, everyone=everyone)
    if not count:
        yield "nothing in flight to cancel"
        return
    yield f"cancelling {_plural(count)} ..."
    await _until_finished(targets)
    yield _cancel_outcome(targets)


async def cancel_request(board: RequestBoard, shown: str, by: Visitor = LOCAL_OPERATOR) -> AsyncIterator[str]:
    """Cancel the request a selected row (or a typed id, short or full) names. Another visitor's request reads
    as no request at all: its id tells nothing."""
    if not (shown or "").strip():
        yield "select a request in the table first (or type its id), then Cancel request"
        return
    request_id = full_request_id(board, shown, None if by.operator else by)
    found = board.find(request_id) if request_id else None
    if found is None or not board.cancel(request_id, by=by):
        yield f"no request in flight with id {markdown_text(repr((shown or '').strip()))}"
        return
    view = found[1]
    yield f"cancelling {markdown_text(tables.short(request_id))} ..."
    await _until_finished([view])
    yield f"{markdown_text(tables.short(request_id))}: {_cancel_outcome([view])}"


def move_request(board: RequestBoard, shown: str, later: bool, by: Visitor = LOCAL_OPERATOR) -> str:
    """Move the selected request (not yet started) one place later or earlier among its run's: they start in that
    order. Another visitor's request reads as no request at all."""
    if not (shown or "").strip():
        return "select a request in the table first (or type its id), then move it"
    request_id = full_request_id(board, shown, None if by.operator else by)
    if request_id is None:
        return f"no request with id {markdown_text(repr((shown or '').strip()))}"
    refusal = board.move(request_id, later, by=by)
    short = markdown_text(tables.short(request_id))
    if refusal is not None:
        return f"{short} not moved: {markdown_text(refusal)}"
    return f"{short} moved {'down' if later else 'up'}: it starts {'after' if later else 'before'} its neighbour"


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
    "studio_wait_s",
    "queue_wait_s",
    "inference_s",
    "download_s",
    "server_latency_s",
    "seed",
    "size",
    "num_frames",
]


def run_requests_flat(controller: StudioController, run_id: str, scope: Visitor | None = None) -> list[dict[str, Any]]:
    """The requests of a run, if `scope` may see it (None: anyone's); a visitor's errors name no server address."""
    shown = (lambda error: error) if scope is None or scope.operator else for_visitors
    flat = []
    for row in controller.store.run_requests(run_id, scope.id if scope is not None else None):
        timings, params = row.get("timings") or {}, row.get("parameters") or {}
        flat.append(
            {
                "id": row["id"],
                "position": row["position"],
                "prompt": row["prompt"],
                "state": row["state"],
                "job_id": row["job_id"],
                "endpoint": row["endpoint"],
                "error": shown(row["error"]),
                "video_path": row["video_path"],
                # From pressing Generate to the video on disk, in its parts; the server-side figure beside it.
                **latency_parts_from_record(timings).as_record(),
                "seed": params.get("seed"),
                "size": f"{params.get('width')}x{params.get('height')}",
                "num_frames": params.get("num_frames"),
            }
        )
    return flat


def _run_spec_record(controller: StudioController, run_id: str, scope: Visitor | None) -> dict[str, Any] | None:
    runs = controller.store.recent_runs(10_000, scope.id if scope is not None else None)
    return next((r["spec"] for r in runs if r["id"] == run_id), None)


# What a request's export holds for operators only: which server made it, and where its video lies on the studio's
# machine (a visitor has the video through the page, its URL).
OPERATOR_EXPORT_FIELDS = ("endpoint", "video_path")


def export_run(controller: StudioController, run_id: str, kind: str, scope: Visitor | None = None) -> Path:
    """Write a run's requests (if `scope` may see it) as JSON or CSV under outputs/exports and return the file.
    `scope` None (an operator's): every field; a visitor's leaves out OPERATOR_EXPORT_FIELDS."""
    rows = run_requests_flat(controller, run_id, scope)
    if not rows:
        raise ValueError(f"no run {run_id!r} in history")
    spec = _run_spec_record(controller, run_id, scope) or {}
    fields = REQUEST_EXPORT_FIELDS
    if scope is not None and not scope.operator:
        fields = [name for name in REQUEST_EXPORT_FIELDS if name not in OPERATOR_EXPORT_FIELDS]
        rows = [{name: row[name] for name in fields} for row in rows]
        if spec.get("input_reference"):  # the kept copy of the visitor's image, by its name only
            spec = {**spec, "input_reference": Path(spec["input_reference"]).name}
    folder = controller.store.root / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    safe_id = "".join(ch for ch in run_id if ch.isalnum() or ch in "_-")
    path = folder / f"{safe_id}.{kind}"
    if kind == "json":
        path.write_text(json.dumps({"run_id": run_id, "spec": spec, "requests": rows}, indent=2))
    else:
        buffer = io.StringIO()
        write_csv_rows(buffer, fields, rows)  # a prompt such as =HYPERLINK(...) is text, not a formula
        path.write_text(buffer.getvalue())
    return path


def rerun(controller: StudioController, run_id: str, scope: Visitor | None = None) -> RunSpec:
    spec = _run_spec_record(controller, run_id, scope)
    if spec is None:
        raise ValueError(f"no run {run_id!r} in history")
    return RunSpec.model_validate(spec)


def form_from_past(
    controller: StudioController, run_id: str, past: dict[str, Any], scope: Visitor | None = None
) -> dict[str, Any]:
    """The Generate form's values that make a past video again (a request of run_requests_flat's): its prompt and
    seed, its run's settings, and the defaults its run took where it named none. One copy, the seed fixed."""
    spec = rerun(controller, run_id, scope)
    defaults = controller.run_defaults(spec.tier)
    size = str(past.get("size") or "")
    made = tiers.tier_and_aspect_of_size(*(int(side) for side in size.split("x"))) if "x" in size else None
    return {
        "prompts": past["prompt"],
        "negative_prompt": spec.negative_prompt or "",
        "tier": spec.tier,
        "aspect": made[1] if made is not None else spec.aspect,  # a prompt line's own aspect, where it had one
        "frames": past.get("num_frames") or spec.frames or defaults.frames,
        "fps": str(spec.fps or defaults.fps),
        "steps": spec.steps or defaults.steps,
        "guidance": spec.guidance if spec.guidance is not None else defaults.guidance,
        "seed": "" if past.get("seed") is None else str(past["seed"]),
        "seed_policy": "fixed",
        "copies": 1,
    }
