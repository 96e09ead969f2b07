"""Settings of the studio and of its embedded engine, each declared once: its default, its bounds and its help.

Read from flags, then env (OMNI_STUDIO_* / OMNI_STUDIO_ENGINE_*), then `.env`. The command-line flags are built
from these fields (studio/settings_flags.py): a field's flag is its name in kebab case unless `json_schema_extra`
names others under "flags"; a list takes one comma-separated value unless it says "repeat".
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, Field, SecretStr, StringConstraints, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from studio import tiers
from studio.protocol import GuidanceScale, InferenceSteps

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = PROJECT_ROOT / "assets"
# The project's own small text-to-video model (trained on procedural scenes; follows prompts of its grammar).
SMALL_MODEL_DIR = ASSETS_DIR / "omni-small-t2v"
# A tiny Wan pipeline with random weights: the same architecture as real Wan models (the GPU batching path and
# the vLLM-Omni server run it), but it makes noise.
TINY_WAN_DIR = ASSETS_DIR / "tiny-wan"
DEFAULT_MODEL_DIR = SMALL_MODEL_DIR
DEFAULT_BLOCKLIST = ASSETS_DIR / "guardrail_blocklist.txt"

# The engines, by name. What each one is (managed or attached, its client, what its servers can do, its defaults) is
# its record in studio/backend/engine_kinds.py, which imports this module: here it is imported inside the functions
# that read a record.
EngineMode = Literal["embedded", "vllm-omni", "remote", "cosmos-framework"]
Cluster = Literal["local", "ray"]
Device = Literal["auto", "cpu", "cuda"]
# A value a vLLM-Omni lever passes on (a cache backend, a quantization method, an attention backend): a name, never
# something the server's parser could read as a flag.
ServerOptionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# Words for "the server's own default" in a lever that names a choice: the lever is then not passed at all.
SERVER_DEFAULT_WORDS = frozenset({"", "off", "none", "auto", "default"})


# The most in-flight slots (and per-visitor requests in flight) a studio may be given, and the most requests a
# visitor may queue, make in an hour, or put in one run.
MAX_IN_FLIGHT_SLOTS = 1024
MAX_QUEUED_REQUESTS = 100_000


def _flags(*names: str) -> dict[str, object]:
    """The command-line names of a field, where its kebab-case name is not (or not only) the flag."""
    return {"flags": names}


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
        json_schema_extra={**_flags("--url"), "repeat": True},
    )
    api_key: SecretStr | None = Field(
        title="API key", default=None, description="bearer key of the servers (better: env OMNI_STUDIO_API_KEY)"
    )


class EmbeddedEngineSettings(BaseModel):
    """The studio's own engine, where it runs and how it guards prompts."""

    group_title: ClassVar[str] = "embedded engine"

    device: Device = Field(title="Device", default="auto", description="the embedded engine's device")
    engine_threads: int | None = Field(
        title="CPU threads per engine", default=None, ge=1, description="torch CPU threads of each embedded engine"
    )
    blocklist: Path = Field(
        title="Guardrail blocklist", default=DEFAULT_BLOCKLIST, description="the guardrail's blocklist file"
    )
    engine_previews: bool = Field(
        title="Previews",
        default=True,
        description="the embedded engine makes previews of each job as it denoises (its events and "
        "/v1/videos/{id}/preview)",
    )
    engine_preview_interval_s: float = Field(
        title="Preview interval (s)",
        default=0.5,
        ge=0,
        le=60,
        description="least seconds between two previews of one job of the embedded engine (one comes at the last "
        "step regardless)",
    )
    engine_step_cache: Literal["off", "reuse", "taylor"] = Field(
        title="Step cache",
        default="off",
        description="the embedded engine skips some denoising steps and estimates them from the computed ones "
        "(reuse: the last; taylor: the line through the last two); off: every step exact; Wan pipelines only",
    )
    engine_step_cache_interval: int = Field(
        title="Step cache interval", default=2, ge=1, le=8, description="one step computed in every N (step cache)"
    )
    engine_quantization: Literal["none", "fp8"] = Field(
        title="Quantization",
        default="none",
        description="the embedded engine's transformer matmuls: none (bf16, exact) or fp8 (e4m3 weights with a "
        "scale per output channel, activations scaled per token; a CUDA GPU of compute capability 8.9 or newer, "
        "Wan pipelines only)",
    )
    engine_attention: Literal["auto", "sage"] = Field(
        title="Attention kernel",
        default="auto",
        description="the embedded engine's attention: auto (the fastest exact kernel, measured at start) or sage "
        "(SageAttention's 8-bit kernel: faster, a little less exact; the sageattention package built for the "
        "GPU, Wan pipelines only)",
    )


class ServerLevers(BaseModel):
    """How a managed server spreads and speeds up one request: its parallel degrees and vLLM-Omni's levers. Each
    vLLM-Omni lever reaches `vllm serve` only when set, so the server's own default holds otherwise."""

    group_title: ClassVar[str] = "server levers"

    tensor_parallel_size: int = Field(
        title="Tensor parallel",
        default=1,
        ge=1,
        description="GPUs per managed server (tensor parallel)",
        json_schema_extra=_flags("--tp", "--tensor-parallel-size"),
    )
    cfg_parallel_size: int = Field(
        title="CFG parallel", default=1, ge=1, le=2, description="classifier-free guidance parallel size"
    )
    ulysses_degree: int = Field(title="Ulysses degree", default=1, ge=1, description="Ulysses sequence parallel degree")
    ring_degree: int | None = Field(
        title="Ring degree",
        default=None,
        ge=1,
        description="Ring sequence parallel degree of a vLLM-Omni server (its GPUs multiply the width); "
        "the embedded engine ignores it",
    )
    cache_backend: ServerOptionName | None = Field(
        title="Cache backend",
        default=None,
        description="diffusion cache of a vLLM-Omni server, e.g. tea_cache or cache_dit (default: off); "
        "the embedded engine ignores it",
        examples=["tea_cache", "cache_dit", "mag_cache", "sea_cache", "step_cache"],
    )
    quantization: ServerOptionName | None = Field(
        title="Quantization",
        default=None,
        description="weight quantization of a vLLM-Omni server, e.g. fp8 (default: off, or what the model's config "
        "says); the embedded engine ignores it",
        examples=["fp8"],
    )
    diffusion_attention_backend: ServerOptionName | None = Field(
        title="Attention backend",
        default=None,
        description="attention backend of a vLLM-Omni server, e.g. FLASH_ATTN, SAGE_ATTN or TORCH_SDPA (default: "
        "the server picks); the embedded engine ignores it (it picks its own fastest kernel)",
        examples=["FLASH_ATTN", "TORCH_SDPA", "SAGE_ATTN", "SAGE_ATTN_3", "CUDNN_ATTN", "FLASHINFER_ATTN"],
    )
    enforce_eager: bool = Field(
        title="Enforce eager",
        default=False,
        description="a vLLM-Omni server runs the model eagerly, without torch.compile (a quicker start, slower "
        "steps); the embedded engine ignores it",
    )
    vae_tiling: bool = Field(
        title="VAE tiling",
        default=False,
        description="a vLLM-Omni server decodes videos tile by tile (less GPU memory at large sizes); "
        "the embedded engine ignores it",
    )

    @field_validator("cache_backend", "quantization", "diffusion_attention_backend", mode="before")
    @classmethod
    def _server_default(cls, value: object) -> object:
        # "off", "auto" and the like (a form's first choice, an env value) mean: pass nothing, the server decides.
        if isinstance(value, str) and value.strip().lower() in SERVER_DEFAULT_WORDS:
            return None
        return value.strip() if isinstance(value, str) else value


class ManagedServerSettings(BaseModel):
    """How the studio starts and watches a server of its own."""

    group_title: ClassVar[str] = "managed server"

    vllm_executable: str = Field(
        title="vllm command",
        default="vllm",
        description="the `vllm` command, or the venv that has it",
        json_schema_extra=_flags("--vllm"),
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
        json_schema_extra=_flags("--init-timeout"),
    )
    guardrails: bool = Field(
        title="Server-wide guardrails",
        default=True,
        description="server-wide guardrails of a managed server",
        json_schema_extra=_flags("--server-guardrails"),
    )
    log_stats: bool = Field(
        title="Log statistics", default=True, description="a managed vLLM-Omni server logs its statistics"
    )
    extra_serve_args: str = Field(
        title="Extra serve args",
        default="",
        description='more `vllm serve` flags, one string, split like a shell would ("--a 1 --b")',
        json_schema_extra=_flags("--serve-args"),
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
        json_schema_extra=_flags("--docker"),
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
        json_schema_extra=_flags("--restart-window"),
    )


class ClientSettings(BaseModel):
    """How the studio's clients wait on servers and their jobs."""

    group_title: ClassVar[str] = "talking to servers"

    request_timeout_s: float = Field(
        title="Request timeout (s)",
        default=3600.0,
        gt=0,
        description="give up on a job after this",
        json_schema_extra=_flags("--request-timeout"),
    )
    http_timeout_s: float = Field(
        title="HTTP timeout (s)",
        default=60.0,
        gt=0,
        description="one HTTP call",
        json_schema_extra=_flags("--http-timeout"),
    )
    poll_interval_s: float = Field(
        title="Poll interval (s)",
        default=0.25,
        gt=0,
        description="seconds between two polls of a job",
        json_schema_extra=_flags("--poll-interval"),
    )
    server_wait_s: float = Field(
        title="Wait for a server (s)",
        default=120.0,
        ge=0,
        description="how long a request waits for a server to come back when none is up, before it fails",
        json_schema_extra=_flags("--server-wait"),
    )


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
        json_schema_extra=_flags("--scale-out-after"),
    )
    scale_in_idle_s: float = Field(
        title="Scale in when idle for (s)",
        default=600.0,
        ge=0,
        description="seconds a replica of a scaling fleet has had nothing to do before it is taken out",
        json_schema_extra=_flags("--scale-in-idle"),
    )


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


class PageSettings(BaseModel):
    """Where results go, where the page listens, and what its form starts with."""

    group_title: ClassVar[str] = "page"

    outputs_dir: Path = Field(
        title="Outputs folder",
        default=Path("outputs"),
        description="outputs dir (videos, sidecars, history, logs)",
        json_schema_extra=_flags("--out"),
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


class AccessSettings(BaseModel):
    """Who is who: accounts of the page, which of them are operators, and whether strangers may generate."""

    group_title: ClassVar[str] = "visitors and operators"

    auth: Annotated[list[SecretStr], NoDecode] = Field(
        title="Accounts",
        default_factory=list,
        description="an account of the page, user:pass (repeatable); each account is its own visitor",
        json_schema_extra={"repeat": True},
    )
    auth_file: Path | None = Field(
        title="Accounts file",
        default=None,
        description="a file of accounts, one user:pass per line (# starts a comment)",
    )
    operators: Annotated[list[str], NoDecode] = Field(
        title="Operators",
        default_factory=list,
        description="a user who runs the servers and sees everyone's work (repeatable; default: the first --auth "
        "user; on a Space, Hugging Face user names)",
        json_schema_extra={**_flags("--operator"), "repeat": True},
    )
    allow_anonymous: bool = Field(
        title="Allow visitors without sign-in",
        default=False,
        description="let visitors who have not signed in generate, each browser its own visitor (never an operator)",
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        title="Trusted proxies",
        default_factory=list,
        description="addresses or networks of the reverse proxies whose X-Forwarded-For the studio believes "
        "(comma-separated, e.g. 127.0.0.1 behind a proxy on this machine; a Space's own networks are set on a Space); "
        "default: none, the peer's own address counts",
        json_schema_extra=_flags("--forwarded-allow-ips"),
    )
    allow_private_image_urls: bool = Field(
        title="Allow private image URLs",
        default=False,
        description="let visitors' image URLs name loopback, private, link-local or reserved addresses (servers on "
        "the studio's own network fetch them); default: refused (operators' URLs are not checked)",
    )
    insecure: bool = Field(
        title="Insecure (everyone an operator)",
        default=False,
        description="serve a non-loopback host or --share with no sign-in, every visitor an operator",
    )


class StudioSettings(
    AccessSettings,
    PageSettings,
    SharingSettings,
    ScalingSettings,
    FleetSettings,
    ClientSettings,
    ManagedServerSettings,
    ServerLevers,
    EmbeddedEngineSettings,
    EngineChoice,
    BaseSettings,
):
    """Everything a user can configure, composed of its groups (SETTINGS_GROUPS), the way vLLM composes its
    configuration: each field is declared once, in its group, with its title (the page's label), its help and its
    bounds; the CLI's argument groups and the Server tab's forms iterate a group's fields. The groups are bases, not
    nested fields, so that every flag and environment variable keeps its flat name (--replicas,
    OMNI_STUDIO_REPLICAS) and every reader its `settings.replicas`; `part(Group)` gives a group on its own.
    CLI flags are passed as init values and win over env."""

    model_config = SettingsConfigDict(
        env_prefix="OMNI_STUDIO_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    @field_validator("remote_urls", "auth", "operators", "forwarded_allow_ips", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        # Env gives a string; accept "a,b" besides JSON.
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _scaling_bounds(self) -> StudioSettings:
        low, high = self.replicas_min, self.replicas_max
        if low is None and high is None:
            return self
        if low is None or high is None:
            raise ValueError(
                "--replicas-min and --replicas-max go together: give both for a fleet that scales with its load, "
                "or neither for a fleet of --replicas"
            )
        if low > high:
            raise ValueError(f"--replicas-min {low} is more than --replicas-max {high}")
        from studio.backend.engine_kinds import engine_kind

        if not engine_kind(self.engine).managed:
            raise ValueError(
                f"--replicas-min/--replicas-max scale a fleet the studio runs (--engine embedded or vllm-omni), "
                f"not {self.engine} servers"
            )
        if "replicas" not in self.model_fields_set:
            self.replicas = low  # a scaling fleet starts small
        elif not low <= self.replicas <= high:
            raise ValueError(
                f"--replicas {self.replicas} (the replicas it starts with) is outside --replicas-min {low} to "
                f"--replicas-max {high}"
            )
        return self

    @property
    def scales(self) -> bool:
        """The fleet follows its load (--replicas-min/--replicas-max)."""
        return self.replicas_min is not None and self.replicas_max is not None

    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key else None

    def part(self, group: type[Group]) -> Group:
        """One group of these settings on its own (the scaling policy is made of ScalingSettings, ...)."""
        return group.model_validate(self.model_dump(include=set(group.model_fields)))


Group = TypeVar("Group", bound=BaseModel)
# The groups, in the order the CLI's help and the Server tab show them.
SETTINGS_GROUPS: tuple[type[BaseModel], ...] = (
    EngineChoice,
    EmbeddedEngineSettings,
    ServerLevers,
    ManagedServerSettings,
    ClientSettings,
    FleetSettings,
    ScalingSettings,
    SharingSettings,
    PageSettings,
    AccessSettings,
)
# What makes a managed engine and how it is started: the flags `ui`, `generate` and `bench` share.
ENGINE_GROUPS = SETTINGS_GROUPS[:4]


def with_engine_key(settings: StudioSettings) -> StudioSettings:
    """The settings a managed engine (the embedded one, or vLLM-Omni started by the studio) is started with: where
    the user gave no API key, a random one made now (a new one at each call), so that its server answers the studio
    alone and no other local process lists or downloads the visitors' videos. The studio hands it to the server
    through VLLM_API_KEY in its environment, as a given key, and uses it in its own clients; it is never printed nor
    put on a command line. Settings of servers the studio does not start, or with a key, are returned as they are."""
    from studio.backend.engine_kinds import engine_kind

    if settings.api_key is not None or not engine_kind(settings).managed:
        return settings
    return settings.model_copy(update={"api_key": SecretStr(secrets.token_urlsafe(32))})


def load_settings(**overrides: object) -> StudioSettings:
    """Settings with CLI overrides; None means "not given" and leaves env or default in place."""
    return StudioSettings(**{key: value for key, value in overrides.items() if value is not None})


# Warm-up sizes on a GPU when none are given: 256p and 480p at 16:9, 33 frames.
DEFAULT_GPU_WARMUP = "320x192x33,832x480x33"


class EngineSettings(BaseSettings):
    """Settings of the embedded engine process (`python -m studio.engine`); flags win over env.

    The API key and the sync timeout use vLLM-Omni's own variable names, so the same environment
    configures either server.
    """

    model_config = SettingsConfigDict(env_prefix="OMNI_STUDIO_ENGINE_", extra="ignore", populate_by_name=True)

    model: str = Field(
        default=str(DEFAULT_MODEL_DIR), description="diffusers pipeline directory (or hub id where a network exists)"
    )
    served_model_name: str | None = Field(
        default=None, description="the name clients send as `model` (default: the model's dir name)"
    )
    host: str = Field(default="127.0.0.1", description="address to bind")
    port: int = Field(default=8000, ge=1, le=65535, description="port to listen on")
    api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("VLLM_API_KEY", "api_key"),
        description="require this bearer key on /v1 (better: env VLLM_API_KEY)",
    )
    device: Device = Field(default="auto", description="where the pipeline runs")
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads")
    guardrails: bool = Field(default=True, description="the text guardrail, server-wide")
    blocklist: Path = Field(default=DEFAULT_BLOCKLIST, description="the guardrail's blocklist file")
    output_dir: Path | None = Field(default=None, description="where finished mp4s are kept (default: a temp dir)")
    default_steps: InferenceSteps = Field(default=tiers.DEFAULT_STEPS, description="steps when a request sends none")
    default_guidance: GuidanceScale = Field(
        default=tiers.DEFAULT_GUIDANCE, description="guidance when a request sends none"
    )
    sync_timeout_s: float = Field(
        default=600.0,
        gt=0,
        validation_alias=AliasChoices("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "sync_timeout_s"),
        description="longest a synchronous request waits for its video (env VLLM_OMNI_VIDEO_SYNC_TIMEOUT)",
    )
    max_kept_jobs: int = Field(default=1000, ge=1, description="finished jobs kept for polling and download")
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info", description="log verbosity")

    # Batching and the GPU path (see studio/engine/jobs.py, generator.py and gpu/gpu_setup.py).
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
    compile_mode: str | None = Field(
        default=None, description="torch.compile mode, e.g. max-autotune-no-cudagraphs (default: inductor's)"
    )
    attention_backend: str = Field(
        default="auto",
        description="diffusers attention backend; auto: the fastest fused kernel measured at start; sage: "
        "SageAttention's 8-bit kernel in the transformer's attention (a lossy lever; the sageattention package "
        "built for this GPU, a Wan pipeline, the engine's fused kernels, else the engine refuses to start)",
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
        description="WxHxF sizes run once before serving, comma-separated, so no request waits for a compile "
        f"('' for none; default on a GPU: {DEFAULT_GPU_WARMUP}; none on CPU)",
    )
    warmup_in_background: bool = Field(
        default=True,
        description="serve once every warm-up size is warm at batch 1; the larger batch sizes warm while nothing "
        "is queued, and batches grow as they do (off: all of it before serving)",
    )
    encode_workers: int | None = Field(
        default=None, ge=0, le=16, description="threads encoding mp4s beside the next batch (default: 8 on a GPU)"
    )
    text_cache_size: int = Field(default=64, ge=0, description="prompt embeddings kept for reuse")
    # A job's previews (studio/engine/previews.py): in its events and at GET /v1/videos/{id}/preview.
    previews: bool = Field(
        default=True,
        description="make small previews of each job as it denoises (a request can turn its own off with "
        'extra_params {"previews": false})',
    )
    preview_interval_s: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="least seconds between two previews of one job; one comes at the last step regardless",
    )
    # Fewer transformer calls per video (studio/engine/step_cache.py): off keeps every step exact.
    step_cache: Literal["off", "reuse", "taylor"] = Field(
        default="off",
        description="skip some denoising steps and estimate their prediction from the computed ones: reuse "
        "(the last one) or taylor (the line through the last two); a request can choose its own with "
        'extra_params {"step_cache": ...}; Wan pipelines (the engine\'s own loop) only',
    )
    step_cache_interval: int = Field(
        default=2, ge=1, le=8, description="with a step cache: one step computed in every N after the first steps"
    )
    step_cache_warm_fraction: float = Field(
        default=0.2, ge=0, le=1, description="with a step cache: this share of the steps, from the first, computed"
    )
    step_cache_final_steps: int = Field(
        default=1, ge=0, le=50, description="with a step cache: the last N steps computed"
    )
    # Fewer bits per matmul (studio/engine/gpu/fp8.py): none keeps the transformer in bf16.
    quantization: Literal["none", "fp8"] = Field(
        default="none",
        description="fp8: the transformer blocks' linear layers run as fp8 matmuls (e4m3 weights with a scale per "
        "output channel, activations scaled per token inside the compiled blocks); a CUDA GPU of compute "
        "capability 8.9 or newer, Wan pipelines only",
    )

    # One request across several GPUs (the engine starts a process per GPU; it serves from the first).
    cfg_parallel_size: int = Field(
        default=1, ge=1, le=2, description="run each request's two guidance halves on two GPUs at once"
    )
    ulysses_degree: int = Field(
        default=1,
        ge=1,
        description="split each request's tokens across this many GPUs (Ulysses; must divide the model's heads)",
    )
    parallel_start_timeout_s: float = Field(
        default=900.0, gt=0, description="seconds the other GPUs' processes may take to join and load the model"
    )
    split_vae_decode: bool = Field(
        default=True,
        description="with a request across GPUs, each GPU decodes a strip of the frames where that pays (480p and "
        "up); off: the first GPU decodes alone while the others go on",
    )
    # Warm restart: what start-up compiles and measures, kept for the next start of the same engine.
    compile_cache: bool = Field(
        default=True,
        description="keep what start-up compiles and measures on disk; the next start of the same engine on this "
        "machine reuses it",
    )
    compile_cache_dir: Path | None = Field(
        default=None, description="the compile cache's folder (default: ~/.cache/omni-studio/engine-compile)"
    )

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model.rstrip("/")).name or self.model
