"""A node's GPUs as a fleet: K replicas of one server, each on its own group of GPUs (or, on a CPU machine,
its own share of the cores), started side by side and watched one by one.

A replica's width is what one request spreads over: its engine's degrees multiplied (studio.backend.engine_kinds:
vLLM-Omni's tensor parallel x cfg parallel x ulysses x ring, the embedded engine's cfg parallel x ulysses). The GPUs
come from --gpus, or from every GPU NVML finds; a layout the GPUs cannot hold is refused before anything
starts, with what it needs and what there is. LocalReplicas hands the controller these replicas one at a
time (as ray_fleet.RayReplicas does on a Ray cluster), so that a fleet can grow and shrink while it serves.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from studio.backend.engine_kinds import ReplicaShape, engine_kind
from studio.backend.servers.launchers import LaunchError, launch_for, parse_gpus, world_size
from studio.backend.servers.machine import cpu_cores, gpus_found
from studio.backend.servers.replica import Replica
from studio.backend.servers.supervisor import ManagedServer
from studio.config import StudioSettings


@dataclass(frozen=True)
class ReplicaPlan:
    index: int
    gpus: list[str] | None  # None: no GPUs of its own (an embedded engine on the CPU)
    settings: StudioSettings  # this replica's: its GPUs, its port, its threads


def _shape(settings: StudioSettings) -> ReplicaShape:
    shape = engine_kind(settings).replica
    if shape is None:
        raise LaunchError(f"{engine_kind(settings).label} are not started by the studio; give their URLs instead")
    return shape


def _uses_gpus(settings: StudioSettings, found: list[str]) -> bool:
    if _shape(settings).gpus_only:
        return True
    return settings.device == "cuda" or (settings.device == "auto" and bool(found))


def plan_fleet(settings: StudioSettings, found: list[str] | None = None, cores: int | None = None) -> list[ReplicaPlan]:
    """The replicas `settings` ask for (settings.replicas of width world_size), each with its GPUs. `found`:
    the machine's GPUs (default: NVML's); `cores`: its cores (default: this process's). Raises LaunchError
    where the GPUs cannot hold the layout."""
    count, width = settings.replicas, world_size(settings)
    found = gpus_found() if found is None else found
    given = parse_gpus(settings.gpus)
    pool = given if given is not None else found
    # Where no GPU can be seen and none is named (a CPU machine, a test platform), the servers report for themselves.
    if given is not None or (pool and _uses_gpus(settings, pool)):
        need = count * width
        if len(pool) < need:
            where = f"--gpus {settings.gpus}" if given is not None else "this machine"
            raise LaunchError(
                f"{count} replica{'s' * (count != 1)} x {width} GPU{'s' * (width != 1)} each ({_degrees(settings)}) "
                f"need {need} GPUs; {where} has {len(pool)}: lower --replicas or the width, or name the GPUs with "
                "--gpus"
            )
        groups: list[list[str] | None] = [pool[i * width : (i + 1) * width] for i in range(count)]
    else:
        groups = [None] * count
    threads: list[int | None] = [settings.engine_threads] * count
    if _shape(settings).threads_on_cpu and groups[0] is None:
        # Replicas on one CPU share its cores, and so do the ranks of a replica as wide as several devices: each
        # rank gets its part of one budget (the threads set, else the cores), or they steal each other's. Every
        # layout then holds the same threads in all, one replica as many as two: a bench compares layouts, not
        # thread counts.
        threads = list(thread_shares(settings.engine_threads or cores or cpu_cores(), count, width))
    replicas = []
    for index, group in enumerate(groups):
        update: dict[str, object] = {"replicas": 1, "engine_threads": threads[index]}
        if group is not None:
            update["gpus"] = ",".join(group)
        if settings.server_port is not None:
            update["server_port"] = settings.server_port + index
        replicas.append(ReplicaPlan(index, group, settings.model_copy(update=update)))
    return replicas


def thread_shares(budget: int, replicas: int, width: int) -> tuple[int, ...]:
    """Torch threads for each rank of each of `replicas` replicas `width` wide, out of `budget` threads: as even as
    whole threads allow, what is left over to the first replicas, at least one a rank (more replicas than the
    budget then hold more threads than it)."""
    share, left = divmod(max(1, budget), replicas)
    return tuple(max(1, (share + (index < left)) // width) for index in range(replicas))


def _degrees(settings: StudioSettings) -> str:
    """What makes a replica's width, in words."""
    return _shape(settings).words(settings)


def _span(gpus: list[str]) -> str:
    numbers = [int(g) for g in gpus]
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))) and len(numbers) > 1:
        return f"{numbers[0]}-{numbers[-1]}"
    return ",".join(gpus)


def layout_label(settings: StudioSettings, replicas: list[ReplicaPlan]) -> str:
    """The layout in a few words: "2 x TP4 on GPUs 0-7", "1 x embedded on the CPU"."""
    shape = _shape(settings).label(settings) or settings.engine
    gpus = [gpu for replica in replicas for gpu in (replica.gpus or [])]
    where = f"on GPUs {_span(gpus)}" if gpus else "on the CPU"
    threads = [replica.settings.engine_threads for replica in replicas]
    if not gpus and _shape(settings).threads_on_cpu and all(threads):
        if len(set(threads)) == 1:
            where += f", {threads[0]} thread{'s' * (threads[0] != 1)} each"
        else:
            where += f", {'+'.join(map(str, threads))} threads"
    return f"{len(replicas)} x {shape} {where}"


def managed_fleet(
    settings: StudioSettings, logs_dir: Path, plan: list[ReplicaPlan] | None = None
) -> list[ManagedServer]:
    """A managed server per replica of `plan` (default: plan_fleet's), not started: its own port, log, GPUs and
    restarts."""
    servers = []
    for replica in plan if plan is not None else plan_fleet(settings):
        suffix = "" if settings.replicas == 1 else f"-{replica.index}"
        servers.append(
            ManagedServer(
                lambda port, s=replica.settings: launch_for(s, port),
                port=replica.settings.server_port,
                log_path=logs_dir / f"{settings.engine}-server{suffix}.log",
                init_timeout_s=settings.init_timeout_s,
                name=f"replica {replica.index}" if settings.replicas > 1 else None,
                gpus=replica.gpus,
            )
        )
    return servers


class ReplicaMaker(Protocol):
    """Makes a fleet's replicas one at a time, and ends those taken out (LocalReplicas, or ray_fleet.RayReplicas).
    Each is a running replica (servers.replica.Replica), made from a ReplicaPlan (its GPUs and settings)."""

    @property
    def layout(self) -> str: ...

    def new(self) -> Replica: ...

    def wait_placed(
        self, server: Replica, cancelled: threading.Event | None = None, timeout_s: float | None = None
    ) -> bool: ...

    def retire(self, server: Replica) -> None: ...


class LocalReplicas:
    """The fleet on this machine's GPUs (or cores). Planned for the most replicas it may have (--replicas-max, else
    --replicas), so that each replica, one added later too, has GPUs of its own (or its share of the cores)."""

    def __init__(self, settings: StudioSettings, logs_dir: Path, plan: list[ReplicaPlan] | None = None):
        """`plan`: the replicas with their GPUs where the caller planned them already (a bench's layout)."""
        most = settings.replicas_max if settings.scales else settings.replicas
        self._settings = settings.model_copy(update={"replicas": most})
        try:
            self._plan = plan if plan is not None else plan_fleet(self._settings)
        except LaunchError as exc:
            if settings.scales:
                raise LaunchError(f"--replicas-max {most}: {exc}") from exc
            raise
        label = layout_label(self._settings, self._plan)
        self.layout = f"{settings.replicas_min}-{most} x {label.split(' x ', 1)[1]}" if settings.scales else label
        self._logs_dir = logs_dir
        self._indices: dict[ManagedServer, int] = {}
        self._lock = threading.Lock()

    def new(self) -> ManagedServer:
        """The replica on the first GPU group (or share of the cores) no running replica holds."""
        with self._lock:
            index = min(set(range(len(self._plan))) - set(self._indices.values()))
            (server,) = managed_fleet(self._settings, self._logs_dir, [self._plan[index]])
            self._indices[server] = index
        return server

    def wait_placed(
        self, server: ManagedServer, cancelled: threading.Event | None = None, timeout_s: float | None = None
    ) -> bool:
        return True  # its GPUs were planned for it

    def retire(self, server: ManagedServer) -> None:
        server.stop()
        with self._lock:
            self._indices.pop(server, None)
