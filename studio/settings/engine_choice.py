"""Which engine makes the videos: one the studio starts, or servers that already run."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import NoDecode

from studio.settings.paths import DEFAULT_MODEL_DIR
from studio.settings_flags import flags

# The engines whose servers the studio starts, watches and stops itself, and those whose servers already run (given
# by --url). What else each one is (its client, what its servers can do, its defaults) is its record in
# studio/backend/engine_kinds.py, which reads these names; the settings need no more of it than these.
ManagedEngineMode = Literal["embedded", "vllm-omni"]
AttachedEngineMode = Literal["remote", "cosmos-framework"]
EngineMode = Literal[ManagedEngineMode, AttachedEngineMode]


class EngineChoice(BaseModel):
    """Which engine makes the videos: one the studio starts, or servers that already run."""

    group_title: ClassVar[str] = "engine"

    engine: EngineMode = Field(
        title="Engine",
        default="embedded",
        description="embedded (the studio's own engine), vllm-omni (a managed `vllm serve --omni`), "
        "remote (vLLM-Omni servers that already run) or cosmos-framework (Cosmos Framework servers that already run)",
    )
    model: str = Field(
        title="Model", default=str(DEFAULT_MODEL_DIR), description="model dir or hub id the managed server serves"
    )
    served_model_name: str | None = Field(
        title="Served model name",
        default=None,
        description="the name clients send as `model` (default: the model's dir name)",
    )
    remote_urls: Annotated[list[str], NoDecode] = Field(
        title="Remote URLs",
        default_factory=list,
        description="a running server, http://host:port or http://host:port/v1 (repeatable: the least busy "
        "gets each request)",
        json_schema_extra={**flags("--url"), "repeat": True},
    )
    api_key: SecretStr | None = Field(
        title="API key", default=None, description="bearer key of the servers (better: env OMNI_STUDIO_API_KEY)"
    )
