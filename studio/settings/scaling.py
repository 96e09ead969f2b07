"""A fleet that follows its load: its bounds and when it grows or shrinks."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from studio.settings_flags import flags


class ScalingSettings(BaseModel):
    """A fleet that follows its load: given both bounds, the studio adds a replica while the queue stays long
    and takes out one that has been idle a while (on Ray, or on this machine's GPUs or cores)."""

    group_title: ClassVar[str] = "scaling"

    replicas_min: int | None = Field(
        title="Fewest replicas",
        default=None,
        ge=1,
        description="the fewest replicas of a fleet that scales with its load (with --replicas-max; default: no "
        "scaling, --replicas always)",
    )
    replicas_max: int | None = Field(
        title="Most replicas",
        default=None,
        ge=1,
        description="the most replicas of a fleet that scales with its load: on this machine, its GPUs must hold "
        "that many (with --replicas-min)",
    )
    scale_out_queue: float = Field(
        title="Scale out above queue per replica",
        default=4.0,
        gt=0,
        description="a scaling fleet adds a replica when its queue per serving replica (requests waiting in the "
        "studio, and at the replicas) stays above this",
    )
    scale_out_after_s: float = Field(
        title="Scale out after (s)",
        default=30.0,
        ge=0,
        description="seconds the queue per replica must stay above --scale-out-queue before a replica is added",
        json_schema_extra=flags("--scale-out-after"),
    )
    scale_in_idle_s: float = Field(
        title="Scale in when idle for (s)",
        default=600.0,
        ge=0,
        description="seconds a replica of a scaling fleet has had nothing to do before it is taken out",
        json_schema_extra=flags("--scale-in-idle"),
    )
