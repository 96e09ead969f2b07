"""The embedded engine's own settings (`python -m studio.engine`): the one declaration of each, its type, default,
bounds, title and help. The engine's flags are these fields; the studio's `engine_*` settings are made from those it
offers (studio/settings/embedded.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from studio import tiers
from studio.engine_levers import DEFAULT_PREVIEW_INTERVAL_S, QuantizationName, StepCacheName
from studio.protocol import GuidanceScale, InferenceSteps
from studio.settings.paths import DEFAULT_BLOCKLIST, DEFAULT_MODEL_DIR

Device = Literal["auto", "cpu", "cuda"]
# Warm-up sizes on a GPU when none are given: 256p and 480p at 16:9, 33 frames.
DEFAULT_GPU_WARMUP = "320x192x33,832x480x33"


class EngineSettings(BaseSettings):
    """Settings of the embedded engine process (`python -m studio.engine`); flags win over env.

    The API key and the sync timeout use vLLM-Omni's own variable names, so the same environment
    configures either server.
    """

    model_config = SettingsConfigDict(env_prefix="OMNI_STUDIO_ENGINE_", extra="ignore", populate_by_name=True)

    model: str = Field(
        title="Model",
        default=str(DEFAULT_MODEL_DIR),
        description="diffusers pipeline directory (or hub id where a network exists)",
    )
    served_model_name: str | None = Field(
        title="Served model name",
        default=None,
        description="the name clients send as `model` (default: the model's dir name)",
    )
    host: str = Field(title="Host", default="127.0.0.1", description="address to bind")
    port: int = Field(title="Port", default=8000, ge=1, le=65535, description="port to listen on")
    api_key: SecretStr | None = Field(
        title="API key",
        default=None,
        validation_alias=AliasChoices("VLLM_API_KEY", "api_key"),
        description="require this bearer key on /v1 (better: env VLLM_API_KEY)",
    )
    device: Device = Field(title="Device", default="auto", description="where the pipeline runs")
    threads: int | None = Field(
        title="CPU threads",
        default=None,
        ge=1,
        description="torch CPU threads, in all: on a CPU, shared out over the replicas and their ranks (default: the cores)",
    )
    guardrails: bool = Field(title="Guardrails", default=True, description="the text guardrail, server-wide")
    blocklist: Path = Field(
        title="Guardrail blocklist", default=DEFAULT_BLOCKLIST, description="the guardrail's blocklist file"
    )
    output_dir: Path | None = Field(
        title="Output folder", default=None, description="where finished mp4s are kept (default: a temp dir)"
    )
    default_steps: InferenceSteps = Field(
        title="Default steps", default=tiers.DEFAULT_STEPS, description="steps when a request sends none"
    )
    default_guidance: GuidanceScale = Field(
        title="Default guidance", default=tiers.DEFAULT_GUIDANCE, description="guidance when a request sends none"
    )
    sync_timeout_s: float = Field(
        title="Sync timeout (s)",
        default=600.0,
        gt=0,
        validation_alias=AliasChoices("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "sync_timeout_s"),
        description="longest a synchronous request waits for its video (env VLLM_OMNI_VIDEO_SYNC_TIMEOUT)",
    )
    max_kept_jobs: int = Field(
        title="Jobs kept", default=1000, ge=1, description="finished jobs kept for polling and download"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        title="Log level", default="info", description="log verbosity"
    )

    # Batching and the GPU path (see studio/engine/jobs.py, generator.py and gpu/gpu_setup.py).
    max_batch: int | None = Field(
        title="Largest batch",
        default=None,
        ge=1,
        le=64,
        description="jobs of one shape per denoising loop (default: 8 on a GPU, 1 on CPU)",
    )
    batch_wait_ms: float = Field(
        title="Batch wait (ms)",
        default=200.0,
        ge=0,
        le=10_000,
        description="longest a queued job waits for partners of its shape (a tenth of it when nothing else runs)",
    )
    compile: Literal["auto", "off", "blocks", "full"] = Field(
        title="Compile",
        default="auto",
        description="torch.compile of the transformer: its repeated blocks on a GPU by default",
    )
    compile_mode: str | None = Field(
        title="Compile mode",
        default=None,
        description="torch.compile mode, e.g. max-autotune-no-cudagraphs (default: inductor's)",
    )
    attention_backend: str = Field(
        title="Attention kernel",
        default="auto",
        description="auto: the fastest exact kernel measured at start; flash3: FlashAttention 3's exact Hopper "
        "kernel; sage, flash3-fp8: 8-bit attention (lossy levers); or a diffusers attention backend by name. Hopper "
        "kernels are built at the first start and cached; where the asked kernel cannot run, the engine refuses to "
        "start and says why",
    )
    cuda_graphs: bool = Field(
        title="CUDA graphs",
        default=True,
        description="replay the transformer's forward as CUDA graphs at the warmed shapes (GPU only)",
    )
    fused_kernels: bool = Field(
        title="Fused kernels",
        default=True,
        description="the engine's own kernels in a Wan transformer: GELU in the feed-forward's product, q/k "
        "normalisation and rotary embedding in one pass, attention without layout copies (GPU only)",
    )
    tune_kernels: bool = Field(
        title="Tune kernels",
        default=True,
        description="time the block sizes of the compiler's fused kernels as they compile: a longer first "
        "start-up (cached after), slightly faster steps (GPU only)",
    )
    warmup: str | None = Field(
        title="Warm-up sizes",
        default=None,
        description="WxHxF sizes run once before serving, comma-separated, so no request waits for a compile "
        f"('' for none; default on a GPU: {DEFAULT_GPU_WARMUP}; none on CPU)",
    )
    warmup_in_background: bool = Field(
        title="Warm up in the background",
        default=True,
        description="serve once every warm-up size is warm at batch 1; the larger batch sizes warm while nothing "
        "is queued, and batches grow as they do (off: all of it before serving)",
    )
    encode_workers: int | None = Field(
        title="Encode workers",
        default=None,
        ge=0,
        le=16,
        description="threads encoding mp4s beside the next batch (default: 8 on a GPU)",
    )
    text_cache_size: int = Field(
        title="Prompt embeddings kept", default=64, ge=0, description="prompt embeddings kept for reuse"
    )
    # A job's previews (studio/engine/previews.py): in its events and at GET /v1/videos/{id}/preview.
    previews: bool = Field(
        title="Previews",
        default=True,
        description="make small previews of each job as it denoises, in its events and at /v1/videos/{id}/preview "
        '(a request can turn its own off with extra_params {"previews": false})',
    )
    preview_interval_s: float = Field(
        title="Preview interval (s)",
        default=DEFAULT_PREVIEW_INTERVAL_S,
        ge=0,
        le=60,
        description="least seconds between two previews of one job; one comes at the last step regardless",
    )
    # Fewer transformer calls per video (studio/engine/step_cache.py): off keeps every step exact.
    step_cache: StepCacheName = Field(
        title="Step cache",
        default="off",
        description="skip some denoising steps and estimate their prediction from the computed ones: reuse "
        "(the last one) or taylor (the line through the last two); a request can choose its own with "
        'extra_params {"step_cache": ...}; Wan pipelines (the engine\'s own loop) only',
    )
    step_cache_interval: int = Field(
        title="Step cache interval",
        default=2,
        ge=1,
        le=8,
        description="with a step cache: one step computed in every N after the first steps",
    )
    step_cache_warm_fraction: float = Field(
        title="Step cache warm fraction",
        default=0.2,
        ge=0,
        le=1,
        description="with a step cache: this share of the steps, from the first, computed",
    )
    step_cache_final_steps: int = Field(
        title="Step cache final steps",
        default=1,
        ge=0,
        le=50,
        description="with a step cache: the last N steps computed",
    )
    # Fewer bits per matmul (studio/engine/gpu/fp8.py): none keeps the transformer in bf16.
    quantization: QuantizationName = Field(
        title="Quantization",
        default="none",
        description="fp8: the transformer blocks' linear layers run as fp8 matmuls (e4m3 weights with a scale per "
        "output channel, activations scaled per token inside the compiled blocks); a CUDA GPU of compute "
        "capability 8.9 or newer, Wan pipelines only",
    )

    # One request across several GPUs (the engine starts a process per GPU; it serves from the first).
    cfg_parallel_size: int = Field(
        title="CFG parallel",
        default=1,
        ge=1,
        le=2,
        description="run each request's two guidance halves on two GPUs at once",
    )
    ulysses_degree: int = Field(
        title="Ulysses degree",
        default=1,
        ge=1,
        description="split each request's tokens across this many GPUs (Ulysses; must divide the model's heads)",
    )
    parallel_start_timeout_s: float = Field(
        title="Parallel start timeout (s)",
        default=900.0,
        gt=0,
        description="seconds the other GPUs' processes may take to join and load the model",
    )
    split_vae_decode: bool = Field(
        title="Split VAE decode",
        default=True,
        description="with a request across GPUs, each GPU decodes a strip of the frames where that pays (480p and "
        "up); off: the first GPU decodes alone while the others go on",
    )
    # Warm restart: what start-up compiles and measures, kept for the next start of the same engine.
    compile_cache: bool = Field(
        title="Compile cache",
        default=True,
        description="keep what start-up compiles and measures on disk; the next start of the same engine on this "
        "machine reuses it",
    )
    compile_cache_dir: Path | None = Field(
        title="Compile cache folder",
        default=None,
        description="the compile cache's folder (default: ~/.cache/omni-studio/engine-compile)",
    )

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model.rstrip("/")).name or self.model
