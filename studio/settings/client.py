"""How the studio's clients wait on servers and their jobs."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from studio.settings_flags import flags


class ClientSettings(BaseModel):
    """How the studio's clients wait on servers and their jobs."""

    group_title: ClassVar[str] = "talking to servers"

    request_timeout_s: float = Field(
        title="Request timeout (s)",
        default=3600.0,
        gt=0,
        description="give up on a job after this",
        json_schema_extra=flags("--request-timeout"),
    )
    http_timeout_s: float = Field(
        title="HTTP timeout (s)",
        default=60.0,
        gt=0,
        description="one HTTP call",
        json_schema_extra=flags("--http-timeout"),
    )
    poll_interval_s: float = Field(
        title="Poll interval (s)",
        default=0.25,
        gt=0,
        description="seconds between two polls of a job",
        json_schema_extra=flags("--poll-interval"),
    )
    server_wait_s: float = Field(
        title="Wait for a server (s)",
        default=120.0,
        ge=0,
        description="how long a request waits for a server to come back when none is up, before it fails",
        json_schema_extra=flags("--server-wait"),
    )
