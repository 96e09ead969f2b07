"""The bench's form, one model for `omni-studio bench` and the page's Bench view: what a bench measures, with
its limits. Light on purpose (pydantic, the tier table, the layout and variant parsers): the CLI builds its flags
from it at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

from studio.backend.bench.variants import parse_variants
from studio.backend.engine_kinds import EMBEDDED
from studio.backend.runs.problems import describe, field_bounds
from studio.backend.runs.spec import MAX_CONCURRENCY
from studio.backend.servers.layouts import Layout, parse_layouts
from studio.protocol import InferenceSteps, Seed
from studio.tiers import DEFAULT_ASPECT, DEFAULT_STEPS, DEFAULT_TIER, TIERS, Aspect, normalize_frames

MAX_BENCH_REQUESTS = 1000
DEFAULT_PROMPTS = [
    "a red circle moving left on a white background",
    "two blue squares moving up on black",
    "a yellow triangle moving right on a gray background",
    "a green circle moving down on a white background",
]


class BenchConfigError(ValueError):
    """A value of the bench's form that cannot be used, said in one line that names the field."""


def _items(value: Any) -> list[Any]:
    """A list as given, or the parts of a comma-separated string."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple | set):
        return [item.strip() if isinstance(item, str) else item for item in value]
    return [value]


def _unset_when_blank(value: Any) -> Any:
    # A form's empty box and 0 both mean "not given" for the optional numbers.
    return None if value in (None, "", 0) else value


class BenchConfig(BaseModel):
    """One bench: a cell per (tier, guardrails, concurrency), each with its warm-up and measured requests; the
    cells run on each fleet (layout x variant) in turn where layouts or variants are given."""

    model_config = ConfigDict(frozen=True)

    requests: int = Field(default=16, ge=1, le=MAX_BENCH_REQUESTS, description="measured requests per cell")
    concurrencies: list[int] = Field(
        default_factory=lambda: [1, 4],
        description=f"requests in flight, one cell each: whole numbers from 1 to {MAX_CONCURRENCY}, "
        "e.g. 1,4,16 (default: 1,4)",
        json_schema_extra={"flags": ("--concurrency",)},
    )
    tiers: list[str] = Field(
        default_factory=lambda: [DEFAULT_TIER],
        description=f"resolution tiers, one cell each: {', '.join(TIERS)} (default: 256p)",
        json_schema_extra={"flags": ("--tier",)},
    )
    aspect: Aspect = Field(default=DEFAULT_ASPECT, description="aspect ratio of every video")
    frames: int | None = Field(
        default=None,
        description="frames per video, checked against every tier (default: the engine's, as a run of the page or "
        f"of generate has it: {EMBEDDED.defaults.frames} on the embedded engine, else the tier's)",
    )
    steps: InferenceSteps | None = Field(
        default=None, description=f"denoising steps (default: {DEFAULT_STEPS}, or the setting default_steps)"
    )
    guardrails: list[bool] = Field(
        default_factory=lambda: [True],
        description="guardrails per request: on, off, or on,off for a cell each (default: on)",
    )
    request_rate: float | None = Field(
        default=None, gt=0, description="open loop: Poisson arrivals per second (default: closed loop)"
    )
    slots_per_server: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="open loop: requests at each server at once, as the studio's in-flight slots let them through; "
        "the rest wait in the studio, their wait counted in their latency (default: no limit)",
    )
    warmup: int = Field(
        default=1,
        ge=0,
        description="requests per cell sent before measuring (and first, on a fleet the bench starts, this many per "
        "replica and tier)",
    )
    slo_s: float | None = Field(
        default=None,
        gt=0,
        description="latency objective (s) for goodput and the recommendation",
        json_schema_extra={"flags": ("--slo-seconds",)},
    )
    prompts: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROMPTS), description="prompts, used in turn (default: built-in ones)"
    )
    seed: Seed = Field(default=0, description="seed of the first request; each next one adds one")
    layouts: list[Layout] = Field(
        default_factory=list,
        description="fleets to compare, REPLICASxWIDTH each, e.g. 1x4,2x2,4x1: replicas side by side behind the "
        "router, each WIDTH GPUs wide (vLLM-Omni: tensor parallel; the embedded engine: 1); each is started, "
        "warmed, measured and stopped in turn (default: --replicas x --tp)",
    )
    variants: dict[str, str] = Field(
        default_factory=dict,
        description='named server variants, name = "extra serve args" (TOML or JSON) in the engine\'s own flags; '
        "every layout runs each (default: the settings as they are)",
    )

    @field_validator("concurrencies", mode="before")
    @classmethod
    def _concurrencies(cls, value: Any) -> list[int]:
        items = _items(value)
        problem = f"concurrency takes whole numbers from 1 to {MAX_CONCURRENCY} separated by commas, got {value!r}"
        numbers = []
        for item in items:
            try:
                number = float(item)
            except (TypeError, ValueError):
                raise ValueError(problem) from None
            if not number.is_integer() or not 1 <= number <= MAX_CONCURRENCY:
                raise ValueError(problem)
            numbers.append(int(number))
        if not numbers:
            raise ValueError(problem)
        return numbers

    @field_validator("tiers", mode="before")
    @classmethod
    def _tiers(cls, value: Any) -> list[str]:
        names = [str(item) for item in _items(value)]
        if not names:
            raise ValueError(f"pick at least one tier: {', '.join(TIERS)}")
        for name in names:
            if name not in TIERS:
                raise ValueError(f"unknown tier {name!r}; choose from {', '.join(TIERS)}")
        return names

    @field_validator("guardrails", mode="before")
    @classmethod
    def _guardrails(cls, value: Any) -> list[bool]:
        choices = []
        for item in _items(value):
            if isinstance(item, bool):
                choices.append(item)
            elif str(item).lower() in ("on", "off"):
                choices.append(str(item).lower() == "on")
            else:
                raise ValueError(f"guardrails takes on, off or on,off, got {value!r}")
        if not choices:
            raise ValueError(f"guardrails takes on, off or on,off, got {value!r}")
        return list(dict.fromkeys(choices))

    @field_validator("frames", "steps", "request_rate", "slots_per_server", "slo_s", mode="before")
    @classmethod
    def _optional_number(cls, value: Any) -> Any:
        return _unset_when_blank(value)

    @field_validator("layouts", mode="before")
    @classmethod
    def _layouts(cls, value: Any) -> list[Layout]:
        return parse_layouts(value)  # LayoutError is a ValueError: its message names the layout

    @field_validator("variants", mode="before")
    @classmethod
    def _variants(cls, value: Any) -> dict[str, str]:
        return parse_variants(value)  # VariantError is a ValueError: its message names the variant

    @field_serializer("layouts")
    def _layout_labels(self, layouts: list[Layout]) -> list[str]:
        return [str(layout) for layout in layouts]

    @field_validator("prompts", mode="before")
    @classmethod
    def _prompts(cls, value: Any) -> list[str]:
        lines = value.splitlines() if isinstance(value, str) else list(value or [])
        prompts = [str(line).strip() for line in lines if str(line).strip()]
        return prompts or list(DEFAULT_PROMPTS)

    @model_validator(mode="after")
    def _frames_fit_every_tier(self) -> BenchConfig:
        if self.frames is not None:
            for tier in self.tiers:
                normalize_frames(self.frames, tier)  # TierError says which bound, for which tier
        return self


def _one_line(exc: ValidationError) -> str:
    """Every problem, in the voice of a run's checks (runs/problems.py): the field, what it takes, what was given."""
    return describe(
        exc, lambda field: field.replace("_", " ") or "bench", lambda field: field_bounds(BenchConfig, field)
    )


def parse_bench_config(values: Mapping[str, Any]) -> BenchConfig:
    """The form's values (keys: BenchConfig's field names; lists also as comma-separated text, prompts also as
    lines of text) as a BenchConfig. Raises BenchConfigError with one line naming the field."""
    unknown = sorted(set(values) - set(BenchConfig.model_fields))
    if unknown:
        raise BenchConfigError(f"unknown bench setting {unknown[0]!r}")
    try:
        return BenchConfig(**values)
    except ValidationError as exc:
        raise BenchConfigError(_one_line(exc)) from None
