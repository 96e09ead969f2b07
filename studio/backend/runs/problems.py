"""What is wrong with a run's fields, in one voice for the page and the CLI: each problem names its field in the
caller's words (the page's label, the CLI's flag), says what the field takes, and what was given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from studio import tiers
from studio.protocol import MAX_GUIDANCE, MAX_SEED, MAX_STEPS, MIN_GUIDANCE, MIN_STEPS

# RunSpec's bounded fields and what each takes: the range is said whole, whichever end was crossed.
RANGES: dict[str, tuple[float, float]] = {
    "steps": (MIN_STEPS, MAX_STEPS),
    "guidance": (MIN_GUIDANCE, MAX_GUIDANCE),
    "seed": (0, MAX_SEED),
}
BOUND_ERRORS = ("greater_than_equal", "less_than_equal", "greater_than", "less_than")


@dataclass(frozen=True)
class Problem:
    field: str  # RunSpec's name for it ("" for the run as a whole)
    text: str  # what is wrong, without the field's name


def _given(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _range_text(field: str, error: ErrorDetails, counts: Callable[[str], tuple[int, int] | None]) -> str:
    known = counts(field) or RANGES.get(field)
    ctx = error.get("ctx") or {}
    if known is not None:
        low, high = known
        allowed = f"from {_number(low)} to {_number(high)}"
    elif "ge" in ctx:
        allowed = f"at least {_number(ctx['ge'])}"
    elif "gt" in ctx:
        allowed = f"more than {_number(ctx['gt'])}"
    elif "le" in ctx:
        allowed = f"at most {_number(ctx['le'])}"
    else:
        allowed = f"less than {_number(ctx.get('lt'))}"
    return f"must be {allowed}, got {_given(error.get('input'))}"


def problem_of(error: ErrorDetails, counts: Callable[[str], tuple[int, int] | None]) -> Problem:
    field = str(error["loc"][0]) if error["loc"] else ""
    kind = error["type"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind in BOUND_ERRORS:
        message = _range_text(field, error, counts)
    elif kind == "string_too_long":
        given = error.get("input")
        message = f"may have at most {(error.get('ctx') or {}).get('max_length')} characters" + (
            f", got {len(given)}" if isinstance(given, str) else ""
        )
    elif message.startswith("Input should be "):
        message = "must be " + message.removeprefix("Input should be ") + f", got {_given(error.get('input'))}"
    elif message.startswith(f"{field} ") or message.startswith(f"{field.replace('_', ' ')} "):
        message = message.split(" ", 1)[1]  # the message named the field already: the caller names it its way
    return Problem(field, message)


def field_bounds(model: type[BaseModel], field: str) -> tuple[float, float] | None:
    """A field's two bounds where it declares both (Field(ge=..., le=...)): the range a message says whole."""
    info = model.model_fields.get(field)
    if info is None:
        return None
    low = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
    return (low, high) if low is not None and high is not None else None


def problems(
    exc: ValidationError, counts: Callable[[str], tuple[int, int] | None] = lambda _field: None
) -> list[Problem]:
    """Every problem of a failed check. `counts(field)`: the range of a counting field (frames: the tier's)."""
    return [problem_of(error, counts) for error in exc.errors()]


def describe(exc: ValidationError, name: Callable[[str], str], counts: Callable[[str], tuple[int, int] | None]) -> str:
    """Every problem in one line: "frames must be from 1 to 400, got 100000; steps must be from 1 to 200, got 201".
    `name(field)`: the field in the caller's words (a label, a flag); an empty name leaves the message alone."""
    parts = []
    for problem in problems(exc, counts):
        named = name(problem.field) if problem.field else ""
        parts.append(f"{named} {problem.text}" if named else problem.text)
    return "; ".join(parts)


def frames_note(frames: int | None, tier: str) -> str | None:
    """Where the frames asked are not what the model makes (it makes 4k+1), what it makes instead; else None."""
    if frames is None:
        return None
    try:
        made = tiers.normalize_frames(frames, tier)
    except tiers.TierError:
        return None  # out of range: the check says so
    if made == frames:
        return None
    how = "rounded up" if made > frames else "rounded down"
    return f"frames {frames} {how} to {made}: the model makes 4k+1 frames"
