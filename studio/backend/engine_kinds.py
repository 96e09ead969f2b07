"""One record per engine kind (embedded, vllm-omni, remote, cosmos-framework): whether the studio starts its servers
or is given them by --url, the client that speaks to them, what they can do (each lack with what the studio says of
it), what a replica's width is made of and the launcher that starts one, and the defaults of a request. Code that
depends on the kind reads these attributes (`engine_kind(settings).managed`, `.capabilities.image`, ...) instead of
comparing engine names.

Light on purpose: the CLI reads it before anything heavy is imported, so the client and launcher classes are named
here and imported on first use. The settings declare the names (`EngineMode`), and which of them the studio starts
(`ManagedEngineMode`: the settings check a scaling fleet by it); they import nothing of the back end.
"""

from __future__ import annotations

import importlib
import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from pydantic import SecretStr

from studio import tiers
from studio.protocol import DEFAULT_FPS
from studio.settings import EngineMode, ManagedEngineMode, ServerLevers, StudioSettings

if TYPE_CHECKING:
    from studio.backend.clients.base import ServerClient
    from studio.backend.servers.launch_spec import Launcher

# ---- what the studio says where a server cannot ------------------------------------------------------------
TEXT_TO_VIDEO_ONLY = "the embedded engine's models are text-to-video: it takes no image (neither an upload nor a URL)"
NO_UPLOAD = (
    "the Cosmos Framework server takes no upload: give the image for image-to-video as an http(s) URL it can "
    "fetch (the page's Image URL, or --image-url)"
)
VLLM_OMNI_PROGRESS = "vLLM-Omni reports progress 0 until the job completes: the studio estimates it"
VLLM_OMNI_CANCEL = "vLLM-Omni answers a cancel at once and keeps computing the request for a while"
NO_PROGRESS = "the Cosmos Framework server reports no progress"
NO_CANCEL = "the Cosmos Framework server has no cancel: it finishes the video anyway"
LATENCY_ONLY = (
    "latency only: the Cosmos Framework server answers once the video is made, so queue wait and inference "
    "cannot be told apart"
)
GUARDRAILS_AT_START = (
    "guardrails are a start-up setting of the Cosmos Framework server (--guardrails / --no-guardrails); "
    "a request cannot change them"
)
NO_PREVIEWS = (
    "this server sends no previews (only the studio's embedded engine does): its progress shows as it reports it"
)
NO_PREVIEWS_COSMOS = "the Cosmos Framework server sends no previews and no progress: the page estimates its progress"
# Every synthetic job id of the Cosmos Framework client starts so: the studio tells that server's requests by it.
COSMOS_FRAMEWORK_JOB_ID_PREFIX = "cosmos-framework-sync-"


# ---- the parts of a record ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capability:
    """One thing an engine's servers can or cannot do; `why_not`: what the studio says where they cannot (in the
    page's notes, the bench report's). True or false as a condition."""

    supported: bool
    why_not: str | None = None

    def __bool__(self) -> bool:
        return self.supported


CAN = Capability(True)


@dataclass(frozen=True)
class ImageInputs:
    """How an engine's contract takes the image for image-to-video: as an upload (a file part of the request), as
    a URL the server fetches, and why not where it takes only one or neither."""

    upload: bool
    url: bool
    why_not: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What an engine's servers can do."""

    real_progress: Capability  # progress that follows the denoising steps (else: the studio estimates it)
    cancel_stops_work: Capability  # a cancel stops the work at the server (else: the server goes on with it)
    request_guardrails: Capability  # guardrails on or off per request (else: the server's start-up setting)
    image: ImageInputs  # image-to-video: by upload, by URL
    queue_and_inference: Capability  # queue wait and inference reported apart (else: latency only)
    previews: Capability = Capability(False, NO_PREVIEWS)  # frames shown while a video is made


@dataclass(frozen=True)
class Degree:
    """One parallel degree of a replica: the setting that gives it, its words, its label in a layout's name."""

    setting: str  # a StudioSettings field
    words: str
    label: str
    always_labelled: bool = False  # named in the layout even at 1 (vLLM-Omni's TP1)


TENSOR_PARALLEL = Degree("tensor_parallel_size", "tensor parallel", "TP", always_labelled=True)
CFG_PARALLEL = Degree("cfg_parallel_size", "cfg parallel", "CFG")
ULYSSES = Degree("ulysses_degree", "ulysses", "SP")
RING = Degree("ring_degree", "ring", "RING")


@dataclass(frozen=True)
class ReplicaShape:
    """What one replica of a managed fleet is: its width (the devices one request spreads over) as the product of
    its degrees, what a bench layout's WIDTH sets, and where it runs."""

    degrees: tuple[Degree, ...]
    # The settings a layout's width sets: one takes it whole; two split it, the first (guidance) first.
    layout_degrees: tuple[str, ...]
    gpus_only: bool  # its servers run on GPUs whatever --device says
    threads_on_cpu: bool  # it may run on a CPU, as threads: replicas (and a replica's ranks) share the cores
    wide_needs_wan: bool  # a replica wider than one device runs Wan pipelines only (the embedded engine's own loop)

    def _values(self, settings: StudioSettings) -> list[tuple[Degree, int | None]]:
        return [(degree, getattr(settings, degree.setting)) for degree in self.degrees]

    def width(self, settings: StudioSettings) -> int:
        """Devices (GPUs) one replica takes."""
        return math.prod(value or 1 for _, value in self._values(settings))

    def words(self, settings: StudioSettings) -> str:
        """The width in words: "tensor parallel 4 x cfg parallel 1 x ulysses 1" (a degree left unset: unsaid)."""
        return " x ".join(f"{degree.words} {value}" for degree, value in self._values(settings) if value is not None)

    def label(self, settings: StudioSettings) -> str:
        """The width as a layout names it: "TP2xCFG2"; empty where every degree is 1 and none is always named."""
        return "x".join(
            f"{degree.label}{value or 1}"
            for degree, value in self._values(settings)
            if degree.always_labelled or (value or 1) > 1
        )

    def layout_width(self, settings: StudioSettings) -> int:
        """The width of the settings' own layout (REPLICASxWIDTH)."""
        return math.prod(getattr(settings, name) or 1 for name in self.layout_degrees)

    def layout_update(self, width: int) -> dict[str, int]:
        """The settings a layout of `width` sets: one degree takes it whole; of two, guidance parallel takes 2 of
        an even width (it exchanges one tensor a step, where Ulysses exchanges every attention's), the other the
        rest."""
        if len(self.layout_degrees) == 1:
            return {self.layout_degrees[0]: width}
        first, second = self.layout_degrees
        return {first: 2, second: width // 2} if width % 2 == 0 else {first: 1, second: width}


@dataclass(frozen=True)
class RunDefaults:
    """What a request asks where the user leaves a field empty: resolved for a tier, an engine kind, and the
    settings (RunSpec.resolved; the page's form shows the same)."""

    frames: int | None  # None: a tier outside the table (RunSpec's shape check names it)
    fps: int
    steps: int
    guidance: float


@dataclass(frozen=True)
class SamplingDefaults:
    """A kind's defaults of a request: Cosmos 3's (tiers.py) unless the kind says otherwise."""

    frames: int | None = None  # None: the tier's (tiers.DEFAULT_FRAMES)
    steps: int = tiers.DEFAULT_STEPS
    guidance: float = tiers.DEFAULT_GUIDANCE


def _imported(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class EngineKind:
    """One kind of engine, as the studio deals with it."""

    name: EngineMode
    label: str  # how the studio names it in a line: "embedded engine", "Cosmos Framework servers"
    client_path: str  # "module:Class" of the client that speaks its contract (imported on first use)
    capabilities: Capabilities
    defaults: SamplingDefaults
    replica: ReplicaShape | None = None  # a managed kind's
    launcher_path: str | None = (
        None  # "module:name" of its launcher (studio.backend.servers.launchers), a managed kind's
    )
    job_id_prefix: str | None = None  # where its job ids tell it apart from the others'
    # Its servers read every server lever (vLLM-Omni's serve flags); else only its replica's degrees.
    reads_serve_levers: bool = False

    @property
    def managed(self) -> bool:
        """The studio starts its servers (else they run already and are given by --url)."""
        return self.name in get_args(ManagedEngineMode)

    def levers(self) -> tuple[str, ...]:
        """The server levers (studio.settings.ServerLevers' fields) its servers read; none for servers the studio
        does not start."""
        if self.replica is None:
            return ()
        if self.reads_serve_levers:
            return tuple(ServerLevers.model_fields)
        return tuple(degree.setting for degree in self.replica.degrees)

    @property
    def client_class(self) -> type[ServerClient]:
        return _imported(self.client_path)

    @property
    def launcher(self) -> Launcher | None:
        """The launcher that starts its servers and reads their flags; None for servers the studio does not start."""
        return _imported(self.launcher_path) if self.launcher_path else None

    @property
    def runs_on_cpu(self) -> bool:
        """Its servers, started by the studio, may run on this machine's CPU."""
        return self.replica is not None and self.replica.threads_on_cpu

    def width(self, settings: StudioSettings) -> int:
        """GPUs a replica takes (1 for servers the studio does not start: it plans none of their GPUs)."""
        return self.replica.width(settings) if self.replica is not None else 1

    def defaults_for(self, tier: str, settings: StudioSettings | None = None) -> RunDefaults:
        """The defaults of a request at `tier`: the settings' default_frames and default_steps, else this kind's."""
        frames = settings.default_frames if settings is not None else None
        steps = settings.default_steps if settings is not None else None
        if frames is None:
            frames = self.defaults.frames if self.defaults.frames is not None else tiers.DEFAULT_FRAMES.get(tier)
        return RunDefaults(
            frames=frames,
            fps=DEFAULT_FPS,
            steps=steps if steps is not None else self.defaults.steps,
            guidance=self.defaults.guidance,
        )


VIDEO_CLIENT = "studio.backend.clients.vllm_omni:VideoClient"
# vLLM-Omni's servers, managed or remote (docs/compatibility.md says where the embedded engine does better).
VLLM_OMNI_CAPABILITIES = Capabilities(
    real_progress=Capability(False, VLLM_OMNI_PROGRESS),
    cancel_stops_work=Capability(False, VLLM_OMNI_CANCEL),
    request_guardrails=CAN,
    # input_reference (a file part) or image_reference ({"image_url": ...}): docs vllm-omni-video-api.
    image=ImageInputs(upload=True, url=True),
    queue_and_inference=CAN,
)

EMBEDDED = EngineKind(
    name="embedded",
    label="embedded engine",
    client_path=VIDEO_CLIENT,
    capabilities=Capabilities(
        real_progress=CAN,
        cancel_stops_work=CAN,
        request_guardrails=CAN,
        # The engine refuses any reference (studio/engine/serving.py).
        image=ImageInputs(upload=False, url=False, why_not=TEXT_TO_VIDEO_ONLY),
        queue_and_inference=CAN,
        previews=CAN,  # its job's events carry them (docs/compatibility.md)
    ),
    # The embedded engine runs on a CPU by default, where a short clip keeps the first video quick.
    defaults=SamplingDefaults(frames=33),
    # Its own parallelism: the guidance halves, then the tokens (it has no tensor parallelism, nor ring).
    replica=ReplicaShape(
        degrees=(CFG_PARALLEL, ULYSSES),
        layout_degrees=(CFG_PARALLEL.setting, ULYSSES.setting),
        gpus_only=False,
        threads_on_cpu=True,
        wide_needs_wan=True,
    ),
    launcher_path="studio.backend.servers.launchers:EMBEDDED_LAUNCHER",
)
VLLM_OMNI = EngineKind(
    name="vllm-omni",
    label="vllm-omni engine",
    client_path=VIDEO_CLIENT,
    capabilities=VLLM_OMNI_CAPABILITIES,
    defaults=SamplingDefaults(),
    # A layout's width is its tensor parallel; cfg parallel, ulysses and ring multiply it.
    replica=ReplicaShape(
        degrees=(TENSOR_PARALLEL, CFG_PARALLEL, ULYSSES, RING),
        layout_degrees=(TENSOR_PARALLEL.setting,),
        gpus_only=True,
        threads_on_cpu=False,
        wide_needs_wan=False,
    ),
    launcher_path="studio.backend.servers.launchers:VLLM_OMNI_LAUNCHER",
    reads_serve_levers=True,
)
REMOTE = EngineKind(
    name="remote",
    label="remote servers",
    client_path=VIDEO_CLIENT,
    capabilities=VLLM_OMNI_CAPABILITIES,
    defaults=SamplingDefaults(),
)
COSMOS_FRAMEWORK = EngineKind(
    name="cosmos-framework",
    label="Cosmos Framework servers",
    client_path="studio.backend.clients.cosmos_framework:CosmosFrameworkClient",
    capabilities=Capabilities(
        real_progress=Capability(False, NO_PROGRESS),
        cancel_stops_work=Capability(False, NO_CANCEL),
        request_guardrails=Capability(False, GUARDRAILS_AT_START),
        # vision_path, a URL or a path on its disk; no upload: docs cosmos-framework-serve-api.
        image=ImageInputs(upload=False, url=True, why_not=NO_UPLOAD),
        queue_and_inference=Capability(False, LATENCY_ONLY),
        previews=Capability(False, NO_PREVIEWS_COSMOS),
    ),
    defaults=SamplingDefaults(),
    job_id_prefix=COSMOS_FRAMEWORK_JOB_ID_PREFIX,
)

KINDS: dict[str, EngineKind] = {kind.name: kind for kind in (EMBEDDED, VLLM_OMNI, REMOTE, COSMOS_FRAMEWORK)}
if set(KINDS) != set(get_args(EngineMode)):  # the settings' names and these records go together
    raise RuntimeError(f"engine kinds {sorted(KINDS)} differ from the settings' {sorted(get_args(EngineMode))}")

# The engines whose servers the studio starts and stops itself, and those whose servers are given by --url.
MANAGED_ENGINES = tuple(name for name, kind in KINDS.items() if kind.managed)
URL_ENGINES = tuple(name for name, kind in KINDS.items() if not kind.managed)


def engine_kind(of: StudioSettings | EngineKind | str) -> EngineKind:
    """The record of an engine: by its settings, or its name. ValueError for a name that is none."""
    if isinstance(of, EngineKind):
        return of
    name = of if isinstance(of, str) else of.engine
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(KINDS)}")
    return kind


def kind_of_job(job_id: str | None) -> EngineKind | None:
    """The kind whose job ids this one has, where job ids tell (only the Cosmos Framework client's do)."""
    return next(
        (kind for kind in KINDS.values() if job_id and kind.job_id_prefix and job_id.startswith(kind.job_id_prefix)),
        None,
    )


def client_class_for(engine: StudioSettings | str) -> type[ServerClient]:
    """The client class for `engine`'s servers."""
    return engine_kind(engine).client_class


def with_engine_key(settings: StudioSettings) -> StudioSettings:
    """The settings a managed engine (the embedded one, or vLLM-Omni started by the studio) is started with: where
    the user gave no API key, a random one made now (a new one at each call), so that its server answers the studio
    alone and no other local process lists or downloads the visitors' videos. The studio hands it to the server
    through VLLM_API_KEY in its environment, as a given key, and uses it in its own clients; it is never printed nor
    put on a command line. Settings of servers the studio does not start, or with a key, are returned as they are."""
    if settings.api_key is not None or not engine_kind(settings).managed:
        return settings
    return settings.model_copy(update={"api_key": SecretStr(secrets.token_urlsafe(32))})
