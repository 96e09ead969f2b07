"""How the studio starts and watches a server of its own."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from studio.settings_flags import flags


class ManagedServerSettings(BaseModel):
    """How the studio starts and watches a server of its own."""

    group_title: ClassVar[str] = "managed server"

    vllm_executable: str = Field(
        title="vllm command",
        default="vllm",
        description="the `vllm` command, or the venv that has it",
        json_schema_extra=flags("--vllm"),
    )
    model_class_name: str | None = Field(
        title="Pipeline class",
        default=None,
        description="the diffusers pipeline class vLLM-Omni loads (when the model's config names none)",
    )
    init_timeout_s: float = Field(
        title="Init timeout (s)",
        default=1800.0,
        gt=0,
        description="seconds to wait for a managed server to be ready",
        json_schema_extra=flags("--init-timeout"),
    )
    guardrails: bool = Field(
        title="Server-wide guardrails",
        default=True,
        description="server-wide guardrails of a managed server",
        json_schema_extra=flags("--server-guardrails"),
    )
    log_stats: bool = Field(
        title="Log statistics", default=True, description="a managed vLLM-Omni server logs its statistics"
    )
    extra_serve_args: str = Field(
        title="Extra serve args",
        default="",
        description='more `vllm serve` flags, one string, split like a shell would ("--a 1 --b")',
        json_schema_extra=flags("--serve-args"),
    )
    allow_risky_serve_args: bool = Field(
        title="Allow exposure-widening serve args (--host, --allowed-local-media-path)",
        default=False,
        description="confirm extra serve args that widen exposure (--host, --allowed-local-media-path)",
    )
    gpus: str | None = Field(
        title="GPUs (e.g. 0,1,2,3)",
        default=None,
        description="GPU indices for the managed server, e.g. 0,1,2,3 (sets CUDA_VISIBLE_DEVICES)",
    )
    docker_image: str = Field(
        title="Docker image", default="vllm/vllm-omni:v0.30.0", description="the image `--docker` runs"
    )
    use_docker: bool = Field(
        title="Run in Docker",
        default=False,
        description="run `vllm serve` in NVIDIA's container",
        json_schema_extra=flags("--docker"),
    )
    hf_home: Path | None = Field(
        title="Hugging Face cache", default=None, description="Hugging Face cache of a managed server (HF_HOME)"
    )
    server_port: int | None = Field(
        title="Server port", default=None, ge=1, le=65535, description="port of a managed server (default: a free one)"
    )
    auto_restart: bool = Field(
        title="Auto-restart",
        default=False,
        description="restart a managed server that crashes and send again what it had not started",
    )
    max_auto_restarts: int = Field(
        title="Most automatic restarts",
        default=3,
        ge=0,
        description="restarts within restart_window_s before giving up",
    )
    restart_window_s: float = Field(
        title="Restart window (s)",
        default=600.0,
        gt=0,
        description="the window max_auto_restarts counts in",
        json_schema_extra=flags("--restart-window"),
    )
