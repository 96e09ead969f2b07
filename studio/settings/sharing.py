"""Many visitors, one studio: the slots they share fairly and what one visitor may take of them."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

# The most in-flight slots (and per-visitor requests in flight) a studio may be given, and the most requests a
# visitor may queue, make in an hour, or put in one run.
MAX_IN_FLIGHT_SLOTS = 1024
MAX_QUEUED_REQUESTS = 100_000


class SharingSettings(BaseModel):
    """Many visitors, one studio: the in-flight slots they share fairly, what one visitor may take of them, and
    how large a run may be. Operators are held to none of the per-visitor limits; the run size binds everyone.
    The upper bounds are far beyond any real studio's; they keep a mistyped value (1e12) from being taken as a
    setting. The operator may change these while the studio serves (StudioController.apply_sharing)."""

    group_title: ClassVar[str] = "sharing"

    in_flight_slots: int | None = Field(
        title="In-flight slots",
        default=None,
        ge=1,
        le=MAX_IN_FLIGHT_SLOTS,
        description="requests at the servers at once, all visitors together; the rest wait in the studio and get "
        "the free slots in turn, visitor by visitor (default: 8 per server)",
    )
    visitor_max_in_flight: int | None = Field(
        title="Per visitor: in flight",
        default=None,
        ge=1,
        le=MAX_IN_FLIGHT_SLOTS,
        description="requests one visitor may have at the servers at once (default: no limit beyond the slots)",
    )
    visitor_max_queued: int = Field(
        title="Per visitor: queued",
        default=64,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="requests one visitor may have waiting in the studio, not yet sent",
    )
    visitor_max_videos_per_hour: int | None = Field(
        title="Per visitor: videos per hour",
        default=None,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="requests one visitor may make in an hour (default: no limit)",
    )
    max_run_requests: int = Field(
        title="Largest run (requests)",
        default=1000,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="requests one run may have (prompts x copies), for every visitor and operator alike",
    )
    visitor_guardrails: Literal["forced", "optional"] = Field(
        title="Per visitor: guardrails",
        default="forced",
        description="forced: every visitor's request is checked by the guardrail, whatever it asks; optional: a "
        "visitor may switch it off (operators always may)",
    )
    visitor_max_calls_in_flight: int = Field(
        title="Per visitor: page calls at once",
        default=8,
        ge=1,
        le=MAX_IN_FLIGHT_SLOTS,
        description="calls of the page or its API one visitor may have in flight at once (waits included); more "
        "are refused at once, so that no visitor holds the page's workers others need",
    )
    visitor_max_uploads_per_hour: int = Field(
        title="Per visitor: uploads per hour",
        default=30,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="files one visitor may upload in an hour",
    )
    visitor_max_upload_mb_per_hour: int = Field(
        title="Per visitor: upload MB per hour",
        default=200,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="megabytes one visitor may upload in an hour",
    )
    new_guests_per_address_per_hour: int = Field(
        title="New guests per address per hour",
        default=10,
        ge=1,
        le=MAX_QUEUED_REQUESTS,
        description="new guest identities (browsers without the studio's cookie) one client address may start in an "
        "hour; guests of one address share their quota and their turn",
    )
    cancel_unsent_on_close: bool = Field(
        title="Cancel a visitor's unsent requests when their page closes",
        default=True,
        description="when a visitor's page closes, cancel their requests not yet sent to a server "
        "(those running finish)",
    )
