"""Servers of the model side by side, each with its own GPUs: on this machine, or on Ray."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

Cluster = Literal["local", "ray"]


class FleetSettings(BaseModel):
    """Servers of the model side by side, each with its own GPUs: on this machine, or placed and supervised by
    Ray beyond one machine."""

    group_title: ClassVar[str] = "fleet"

    cluster: Cluster = Field(
        title="Cluster",
        default="local",
        description="where the fleet's replicas run: local (this machine) or ray (Ray actors, on the nodes Ray "
        "places them)",
    )
    ray_address: str | None = Field(
        title="Ray address",
        default=None,
        description="a running Ray cluster, host:6379 (default with --cluster ray: a local Ray on loopback)",
    )
    replicas: int = Field(
        title="Replicas",
        default=1,
        ge=1,
        description="servers of the model side by side behind the studio's router, each on its own GPUs "
        "(a replica's width: --tp x --cfg-parallel-size x --ulysses-degree, and x --ring-degree for vLLM-Omni, GPUs); "
        "with --replicas-min/--replicas-max, how many it starts with (default: the minimum)",
    )
