"""A Hugging Face Space's environment, read into the studio's settings.

A Space runs `python studio/app.py` with SPACE_ID, SPACE_HOST, GRADIO_SERVER_NAME and GRADIO_SERVER_PORT set, on
hardware the studio does not choose, and mounts persistent storage at /data where the Space has some. Here the
studio binds what the Space says, keeps its outputs and history on that storage, and sizes how visitors share the
engine for the hardware found. Whatever the environment sets explicitly (OMNI_STUDIO_*) wins over these choices.
Off a Space (no SPACE_ID) the settings are left as they are.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from studio.backend.engine_kinds import engine_kind
from studio.backend.runs.fair_share import SLOTS_PER_SERVER
from studio.config import StudioSettings

# Where the studio keeps its files inside the Space's persistent storage.
SPACE_STORAGE_SUBDIR = "omni-studio"
SPACE_HOST_DEFAULT = "0.0.0.0"
SPACE_PORT_DEFAULT = 7860
# Who may say where a request came from on a Space: every visitor reaches the app through the Space's proxy, whose
# address is one of the Space platform's own network (a private one), never the visitor's; the proxy adds the
# visitor's address to X-Forwarded-For. Trusting the private networks (not '*') makes uvicorn take the right-most
# address that is not one of them, the one the proxy saw: an entry a visitor wrote into the header itself stays to
# its left and is never believed, while '*' would believe the left-most, the visitor's own words.
SPACE_PROXY_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "::1", "fc00::/7")


class SpaceEnvironment(BaseSettings):
    """What a Space tells its app through the environment (the Space's own variable names)."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    space_id: str | None = Field(default=None, alias="SPACE_ID", description="owner/name of the Space")
    space_host: str | None = Field(default=None, alias="SPACE_HOST", description="the Space's public host name")
    server_name: str | None = Field(default=None, alias="GRADIO_SERVER_NAME", description="address to bind")
    server_port: int | None = Field(
        default=None, ge=1, le=65535, alias="GRADIO_SERVER_PORT", description="port the Space routes to"
    )
    storage: Path = Field(
        default=Path("/data"),
        alias="OMNI_STUDIO_SPACE_DATA",
        description="where the Space's persistent storage is mounted (a Space mounts it at /data)",
    )

    @property
    def on_space(self) -> bool:
        return bool(self.space_id)


@dataclass(frozen=True)
class SharingLimits:
    """How visitors share the engine: the settings fields of the same names."""

    in_flight_slots: int | None
    visitor_max_in_flight: int | None
    visitor_max_queued: int
    visitor_max_videos_per_hour: int | None

    def describe(self) -> str:
        slots = f"{self.in_flight_slots or SLOTS_PER_SERVER}{'' if self.in_flight_slots else ' per server'} at once"
        hourly = self.visitor_max_videos_per_hour or "no limit"
        return (
            f"{slots}; each visitor {self.visitor_max_in_flight or 'no limit'} in flight, "
            f"{self.visitor_max_queued} waiting, {hourly} an hour"
        )


# The embedded engine on a CPU makes one video at a time (no batching on CPU), a 256p one in a few seconds: two
# slots keep the next request ready at the engine while the studio orders the rest visitor by visitor, and one
# request in flight per visitor lets each newcomer's request be the next one made.
CPU_SPACE_LIMITS = SharingLimits(
    in_flight_slots=2, visitor_max_in_flight=1, visitor_max_queued=8, visitor_max_videos_per_hour=60
)
# On a GPU (or remote servers) the engine batches up to 8 requests of one shape: the default slots fill a batch,
# and one visitor may take half of it.
GPU_SPACE_LIMITS = SharingLimits(
    in_flight_slots=None, visitor_max_in_flight=4, visitor_max_queued=32, visitor_max_videos_per_hour=240
)


@dataclass(frozen=True)
class Hardware:
    gpus: int
    cpus: int


@dataclass(frozen=True)
class HostedStudio:
    """The settings to serve with, and what to tell the person who runs the Space."""

    settings: StudioSettings
    on_space: bool
    persistent: bool  # outputs and history survive a restart
    notes: tuple[str, ...]


def visible_gpus() -> int:
    """NVIDIA GPUs this process can use, through NVML (no torch import at start-up); 0 without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no GPU
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()


def cpu_allowance() -> int:
    """CPUs this container may use: its cgroup quota where one is set, else the CPUs it may run on. A Space's
    container sees the host's cores but gets 2 of them (CPU basic); torch sized to the host would oversubscribe."""
    cpus = len(os.sched_getaffinity(0))
    quota = _cgroup_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def _cgroup_quota() -> float | None:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]  # cgroup v2: "max 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 else None
    except (OSError, ValueError):
        return None


def detect_hardware() -> Hardware:
    return Hardware(gpus=visible_gpus(), cpus=cpu_allowance())


def writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def makes_videos_on_cpu(settings: StudioSettings, hardware: Hardware) -> bool:
    """The studio's own engine, on this machine's CPU (vLLM-Omni and remote servers run on GPUs)."""
    return engine_kind(settings).runs_on_cpu and (settings.device == "cpu" or hardware.gpus == 0)


def hosted_settings(
    settings: StudioSettings | None = None,
    environment: SpaceEnvironment | None = None,
    hardware: Hardware | None = None,
) -> HostedStudio:
    """`settings` (default: from env and .env) completed for the Space the studio runs on, if any."""
    settings = settings or StudioSettings()
    environment = environment or SpaceEnvironment()
    if not environment.on_space:
        return HostedStudio(settings, on_space=False, persistent=True, notes=())
    hardware = hardware or detect_hardware()
    given = settings.model_fields_set  # set by env, .env or the caller: never overridden
    changes: dict[str, object] = {}
    notes = [f"running on the Space {environment.space_id}" + _public_url(environment)]

    if "host" not in given:
        changes["host"] = environment.server_name or SPACE_HOST_DEFAULT
    if "port" not in given:
        changes["port"] = environment.server_port or SPACE_PORT_DEFAULT
    if "forwarded_allow_ips" not in given:
        changes["forwarded_allow_ips"] = list(SPACE_PROXY_NETWORKS)

    persistent, outputs, where = _storage(settings, environment, given)
    if outputs is not None:
        changes["outputs_dir"] = outputs
    notes.append(where)

    on_cpu = makes_videos_on_cpu(settings, hardware)
    if on_cpu and "engine_threads" not in given:
        changes["engine_threads"] = hardware.cpus
    limits = CPU_SPACE_LIMITS if on_cpu else GPU_SPACE_LIMITS
    names = [field.name for field in fields(SharingLimits)]
    changes.update({name: getattr(limits, name) for name in names if name not in given})
    hosted = settings.model_copy(update=changes)
    shared = SharingLimits(**{name: getattr(hosted, name) for name in names})
    notes.append(f"{'CPU' if on_cpu else 'GPU or remote'} sharing: {shared.describe()} (OMNI_STUDIO_* change them)")
    notes.append(_sign_in_note(hosted))
    proxies = ", ".join(hosted.forwarded_allow_ips) or "none"
    notes.append(
        f"client addresses from X-Forwarded-For of the Space's proxy ({proxies}; OMNI_STUDIO_FORWARDED_ALLOW_IPS)"
    )
    return HostedStudio(hosted, on_space=True, persistent=persistent, notes=tuple(notes))


def _public_url(environment: SpaceEnvironment) -> str:
    return f" (https://{environment.space_host})" if environment.space_host else ""


def _storage(settings: StudioSettings, environment: SpaceEnvironment, given: set[str]) -> tuple[bool, Path | None, str]:
    """Whether outputs persist, the outputs dir to use (None: keep the settings'), and a line saying where."""
    storage = environment.storage
    if "outputs_dir" in given:
        chosen = Path(settings.outputs_dir).resolve()
        persistent = chosen.is_relative_to(storage.resolve())
        kept = "kept across restarts" if persistent else "lost when the Space restarts"
        return persistent, None, f"outputs and history in {chosen} (OMNI_STUDIO_OUTPUTS_DIR): {kept}"
    if writable_dir(storage):
        outputs = storage / SPACE_STORAGE_SUBDIR
        try:
            outputs.mkdir(exist_ok=True)
        except OSError as exc:
            return False, None, _ephemeral(settings, f"{outputs} cannot be made ({exc})")
        return True, outputs, f"outputs and history in {outputs}, the Space's persistent storage"
    return False, None, _ephemeral(settings, f"no writable persistent storage at {storage}")


def _ephemeral(settings: StudioSettings, why: str) -> str:
    return (
        f"{why}: outputs and history go to {Path(settings.outputs_dir).resolve()} and are lost when the Space "
        "restarts (attach persistent storage in the Space's settings: it is mounted at /data)"
    )


def _sign_in_note(settings: StudioSettings) -> str:
    operators = ", ".join(settings.operators) if settings.operators else "none (set OMNI_STUDIO_OPERATORS)"
    anonymous = "on" if settings.allow_anonymous else "off (OMNI_STUDIO_ALLOW_ANONYMOUS=true turns it on)"
    return f"sign-in with Hugging Face; operators: {operators}; generating without signing in: {anonymous}"
