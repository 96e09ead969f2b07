"""Settings of the studio: one place, read from flags, then env (OMNI_STUDIO_*), then `.env`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = PROJECT_ROOT / "assets"
# The project's own small text-to-video model (trained on procedural scenes; follows prompts of its grammar).
SMALL_MODEL_DIR = ASSETS_DIR / "omni-small-t2v"
# A tiny Wan pipeline with random weights: the same architecture as real Wan models (the GPU batching path and
# the vLLM-Omni server run it), but it makes noise.
TINY_WAN_DIR = ASSETS_DIR / "tiny-wan"
DEFAULT_MODEL_DIR = SMALL_MODEL_DIR
DEFAULT_BLOCKLIST = ASSETS_DIR / "guardrail_blocklist.txt"

EngineMode = Literal["embedded", "vllm-omni", "remote"]


class StudioSettings(BaseSettings):
    """Everything a user can configure. CLI flags are passed as init values and win over env."""

    model_config = SettingsConfigDict(
        env_prefix="OMNI_STUDIO_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # Which engine makes the videos.
    engine: EngineMode = "embedded"
    model: str = Field(default=str(DEFAULT_MODEL_DIR), description="model dir or hub id to serve")
    served_model_name: str | None = None
    remote_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="base URLs of running servers"
    )
    api_key: SecretStr | None = Field(default=None, description="bearer key of the servers")

    # Embedded engine.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    engine_threads: int | None = Field(default=None, ge=1, description="torch threads of the engine")
    blocklist: Path = DEFAULT_BLOCKLIST

    # vLLM-Omni serve options.
    vllm_executable: str = Field(default="vllm", description="path or name of the `vllm` command")
    tensor_parallel_size: int = Field(default=1, ge=1)
    cfg_parallel_size: int = Field(default=1, ge=1, le=2)
    ulysses_degree: int = Field(default=1, ge=1)
    model_class_name: str | None = None
    init_timeout_s: float = Field(default=1800.0, gt=0)
    guardrails: bool = Field(default=True, description="server-wide guardrails")
    log_stats: bool = True
    extra_serve_args: str = Field(default="", description="more `vllm serve` flags, split with shlex")
    allow_risky_serve_args: bool = Field(
        default=False,
        description="confirm extra serve args that widen exposure (--host, --allowed-local-media-path)",
    )
    gpus: str | None = Field(default=None, description="e.g. 0,1,2,3: sets CUDA_VISIBLE_DEVICES")
    docker_image: str = "vllm/vllm-omni:v0.30.0"
    use_docker: bool = False
    hf_home: Path | None = None
    server_port: int | None = Field(default=None, ge=1, le=65535, description="port of a managed server")
    auto_restart: bool = Field(
        default=False, description="restart a managed server that dies and resubmit what it never started"
    )
    max_auto_restarts: int = Field(default=3, ge=0, description="restarts within restart_window_s before giving up")
    restart_window_s: float = Field(default=600.0, gt=0)

    # Client.
    request_timeout_s: float = Field(default=3600.0, gt=0, description="give up on a job after this")
    http_timeout_s: float = Field(default=60.0, gt=0, description="one HTTP call")
    poll_interval_s: float = Field(default=0.25, gt=0)

    # Where results go.
    outputs_dir: Path = Path("outputs")

    # The page.
    host: str = "127.0.0.1"
    port: int = Field(default=7860, ge=1, le=65535)
    share: bool = False
    auth: str | None = Field(default=None, description="user:pass")
    insecure: bool = False
    default_tier: Literal["256p", "480p", "720p"] = "256p"
    default_frames: int | None = Field(default=None, ge=1, description="frames when none are given (tier default)")
    default_steps: int | None = Field(default=None, ge=1, le=200, description="steps when none are given")

    @field_validator("remote_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        # Env gives a string; accept "a,b" besides JSON.
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key else None


def load_settings(**overrides: object) -> StudioSettings:
    """Settings with CLI overrides; None means "not given" and leaves env or default in place."""
    return StudioSettings(**{key: value for key, value in overrides.items() if value is not None})


class EngineSettings(BaseSettings):
    """Settings of the embedded engine process (`python -m studio.engine`); flags win over env.

    The API key and the sync timeout use vLLM-Omni's own variable names, so the same environment
    configures either server.
    """

    model_config = SettingsConfigDict(env_prefix="OMNI_STUDIO_ENGINE_", extra="ignore", populate_by_name=True)

    model: str = str(DEFAULT_MODEL_DIR)
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("VLLM_API_KEY", "api_key"))
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(default=None, ge=1)
    guardrails: bool = True
    blocklist: Path = DEFAULT_BLOCKLIST
    output_dir: Path | None = None
    default_steps: int = Field(default=35, ge=1, le=200)
    default_guidance: float = Field(default=6.0, ge=0, le=20)
    sync_timeout_s: float = Field(
        default=600.0, gt=0, validation_alias=AliasChoices("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "sync_timeout_s")
    )
    max_kept_jobs: int = Field(default=1000, ge=1)
    log_level: str = "info"

    # Batching and the GPU path (see studio/engine/jobs.py and pipeline.py).
    max_batch: int | None = Field(
        default=None, ge=1, le=64, description="jobs of one shape per denoising loop (default: 8 on a GPU, 1 on CPU)"
    )
    batch_wait_ms: float = Field(
        default=200.0,
        ge=0,
        le=10_000,
        description="longest a queued job waits for partners of its shape (a tenth of it when nothing else runs)",
    )
    compile: Literal["auto", "off", "blocks", "full"] = Field(
        default="auto", description="torch.compile of the transformer: its repeated blocks on a GPU by default"
    )
    compile_mode: str | None = Field(default=None, description="torch.compile mode (default: inductor's default)")
    attention_backend: str = Field(
        default="auto", description="diffusers attention backend; auto: the fastest fused kernel measured at start"
    )
    cuda_graphs: bool = Field(
        default=True, description="replay the transformer's forward as CUDA graphs at the warmed shapes (GPU only)"
    )
    fused_kernels: bool = Field(
        default=True,
        description="the engine's own kernels in a Wan transformer: GELU in the feed-forward's product, q/k "
        "normalisation and rotary embedding in one pass, attention without layout copies (GPU only)",
    )
    tune_kernels: bool = Field(
        default=True,
        description="time the block sizes of the compiler's fused kernels as they compile: a longer first "
        "start-up (cached after), slightly faster steps (GPU only)",
    )
    warmup: str | None = Field(
        default=None,
        description="WxHxF sizes run once before serving, so no request waits for a compile "
        "(default on a GPU: 320x192x33,832x480x33; none on CPU)",
    )
    encode_workers: int | None = Field(
        default=None, ge=0, le=16, description="threads encoding mp4s beside the next batch (default: 8 on a GPU)"
    )
    text_cache_size: int = Field(default=64, ge=0, description="prompt embeddings kept for reuse")

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model.rstrip("/")).name or self.model
