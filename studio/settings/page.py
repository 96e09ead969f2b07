"""Where results go, where the page listens, and what its form starts with."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from studio import tiers
from studio.protocol import InferenceSteps
from studio.settings_flags import flags


class PageSettings(BaseModel):
    """Where results go, where the page listens, and what its form starts with."""

    group_title: ClassVar[str] = "page"

    outputs_dir: Path = Field(
        title="Outputs folder",
        default=Path("outputs"),
        description="outputs dir (videos, sidecars, history, logs)",
        json_schema_extra=flags("--out"),
    )
    host: str = Field(title="Host", default="127.0.0.1", description="address the page binds")
    port: int = Field(title="Port", default=7860, ge=1, le=65535, description="port of the page")
    share: bool = Field(title="Share link", default=False, description="a public link through Gradio's tunnel")
    default_tier: tiers.Tier = Field(
        title="Default tier", default=tiers.DEFAULT_TIER, description="the page's tier at start"
    )
    default_frames: int | None = Field(
        title="Default frames",
        default=None,
        ge=1,
        description="frames when none are given (default: the engine's: a short clip on the embedded engine, else the "
        "tier's)",
    )
    default_steps: InferenceSteps | None = Field(
        title="Default steps", default=None, description=f"steps when none are given (default: {tiers.DEFAULT_STEPS})"
    )
