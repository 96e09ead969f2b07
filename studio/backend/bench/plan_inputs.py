"""What a capacity plan is asked (plan.py): the rate, the objective, the GPUs. Light on purpose (pydantic and a
constant): the CLI builds `omni-studio plan`'s flags from it at start-up, before anything heavy loads."""

from __future__ import annotations

from pydantic import BaseModel, Field

from studio.backend.runs.fair_share import SLOTS_PER_SERVER

DEFAULT_ATTAINMENT = 0.95


class PlanInputs(BaseModel):
    """What a plan is asked."""

    rate_per_min: float = Field(
        gt=0, le=1e6, description="arrivals, in videos per minute (Poisson)", json_schema_extra={"flags": ("--rate",)}
    )
    slo_s: float = Field(
        gt=0,
        le=86400,
        description="latency objective (s): a request is on time when its video arrives within it",
        json_schema_extra={"flags": ("--slo-seconds",)},
    )
    attainment: float = Field(
        default=DEFAULT_ATTAINMENT, gt=0, lt=1, description="the share of requests that must be on time"
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        description="GPUs the fleet may take (CPU cores, for a bench on a CPU): the layouts that fit are compared "
        "(default: this machine's GPUs, or every layout of the report where it has none)",
    )
    tier: str | None = Field(
        default=None, description="the tier to plan for, one at a time (default: the report's first)"
    )
    slots_per_server: int | None = Field(
        default=None,
        ge=1,
        description=f"the studio's in-flight slots per server (default: the report's setting, else {SLOTS_PER_SERVER})",
    )
    seed: int = Field(default=0, ge=0, description="seed of the simulation")
