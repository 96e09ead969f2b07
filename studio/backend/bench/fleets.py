"""The fleets a bench compares: every layout x variant, each planned (GPUs, serve args) and checked before any
server starts, then started one after the other by the studio's own fleet code, so that what the bench measures
is what the studio runs when the layout is applied (studio.backend.servers.fleet_manager): on this machine, or with
`--cluster ray` as Ray actors on the Ray the bench joins once for all its fleets."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from studio.backend.bench.config import BenchConfig
from studio.backend.bench.variants import BASE, Variant, check_variants, serve_args, variants_of
from studio.backend.engine_kinds import engine_kind, with_engine_key
from studio.backend.servers import ray_cluster
from studio.backend.servers.fleet_manager import FleetManager
from studio.backend.servers.layouts import Layout, LayoutError, layout_settings, plan_layout, settings_layout
from studio.backend.servers.local_fleet import ReplicaPlan
from studio.backend.servers.machine import cpu_cores, gpus_found
from studio.backend.servers.ray_fleet import replica_resources
from studio.backend.servers.replica import Replica
from studio.config import StudioSettings

# On Ray: how long a fleet waits for Ray to place all its replicas (other work on the cluster holding its GPUs)
# before it is reported as not started; Ray itself would wait for ever.
PLACEMENT_TIMEOUT_S = 120.0
# Nodes named in a message about room on the cluster; the rest are counted.
NODES_SHOWN = 6


@dataclass(frozen=True)
class Fleet:
    """One layout with one variant, as the bench starts it."""

    layout: Layout
    variant: Variant
    settings: StudioSettings  # the fleet's own: replicas, width, extra serve args
    replicas: list[ReplicaPlan]  # each with its GPUs (None on a CPU, and on Ray, which picks them)
    # On Ray: what each replica's actor asks Ray for (num_gpus, num_cpus); None: a fleet of this machine.
    ray_resources: dict[str, float] | None = None

    @property
    def label(self) -> str:
        return f"{self.layout} {self.variant}"

    @property
    def slug(self) -> str:
        """The label as a folder name (the fleet's logs)."""
        return re.sub(r"[^\w.-]+", "_", self.label)

    @property
    def on_ray(self) -> bool:
        return self.ray_resources is not None

    @property
    def gpus(self) -> list[str]:
        return [gpu for replica in self.replicas for gpu in (replica.gpus or [])]

    @property
    def device_kind(self) -> str:
        if self.ray_resources is not None:
            return "GPU" if self.ray_resources["num_gpus"] else "CPU core"
        return "GPU" if self.gpus else "CPU core"

    @property
    def devices(self) -> int:
        """What the fleet holds: its GPUs, or on a CPU the cores its replicas' threads use (on Ray: the CPUs its
        actors hold, which Ray gives their servers as their thread budget)."""
        if self.ray_resources is not None:
            each = self.ray_resources["num_gpus"] or self.ray_resources["num_cpus"]
            return max(1, math.ceil(self.layout.replicas * each))
        if self.gpus:
            return len(self.gpus)
        cores = cpu_cores()
        # Each rank of a replica (its width) runs with the replica's threads.
        used = sum((replica.settings.engine_threads or cores) * self.layout.width for replica in self.replicas)
        return max(1, min(cores, used))

    def describe(self) -> dict[str, object]:
        """The fleet as the report keeps it (and the page applies it)."""
        return {
            "label": self.label,
            "layout": str(self.layout),
            "replicas": self.layout.replicas,
            "width": self.layout.width,
            "variant": self.variant.name,
            "variant_args": self.variant.args,
            "serve_args": self.settings.extra_serve_args,
            "cluster": "ray" if self.on_ray else "local",
            **({"ray_resources": self.ray_resources} if self.on_ray else {}),
            "gpus": [replica.gpus for replica in self.replicas],
            "engine_threads": [replica.settings.engine_threads for replica in self.replicas],
            "devices": self.devices,
            "device_kind": self.device_kind,
        }


def plan_bench(settings: StudioSettings, config: BenchConfig, found: list[str] | None = None) -> list[Fleet]:
    """Every fleet of the bench, layout by layout, each layout with every variant. Raises LayoutError or
    VariantError, naming the layout, variant or flag, before anything starts. `found`: the machine's GPUs
    (default: every GPU found). With --cluster ray the layouts are checked against the nodes of the Ray
    (joined, or started on loopback, here) instead of this machine's GPUs."""
    if settings.cluster == "ray":
        return _plan_on_ray(settings, config)
    layouts = config.layouts or [settings_layout(settings)]
    found = gpus_found() if found is None else found
    for layout in layouts:  # the cheap checks first: a variant's may read a server's help for seconds
        plan_layout(settings, layout, found)
    variants = variants_of(config.variants)
    check_variants(settings, variants)
    fleets = []
    for layout in layouts:
        for variant in variants:
            # Each fleet's servers answer the bench alone: with the user's key, else a random one of its own.
            varied = with_engine_key(settings.model_copy(update={"extra_serve_args": serve_args(settings, variant)}))
            replicas = plan_layout(varied, layout, found)
            fleets.append(Fleet(layout, variant, layout_settings(varied, layout), replicas))
    return fleets


def running_fleet(settings: StudioSettings, replicas: int) -> Fleet | None:
    """The studio's own fleet as it serves now (`replicas` of the settings' width, as they are), as the bench's
    fleet of the base variant: what a bench on its endpoints measured, for a plan to model. None for servers the
    studio does not start, or a layout that cannot be told (GPUs that no longer hold it)."""
    if not engine_kind(settings).managed:
        return None
    try:
        layout = Layout(replicas, settings_layout(settings).width)
        fleet_settings = layout_settings(settings, layout)
        if settings.cluster == "ray":  # as _plan_on_ray has it: Ray picked the GPUs
            one = fleet_settings.model_copy(update={"replicas": 1, "gpus": None, "server_port": None})
            plans = [ReplicaPlan(index, None, one) for index in range(replicas)]
            return Fleet(layout, Variant(BASE, ""), fleet_settings, plans, replica_resources(fleet_settings))
        return Fleet(layout, Variant(BASE, ""), fleet_settings, plan_layout(settings, layout))
    except LayoutError:
        return None


def start_fleet(fleet: Fleet, logs_dir: Path) -> FleetManager:
    """The fleet started by the studio's own fleet manager, once every server answers /health; on a failure none
    is left running. On Ray, every replica's actor is placed first (ServerStartError where Ray has no room for one
    within PLACEMENT_TIMEOUT_S: the previous fleet's actors going, other work on the cluster), then each starts its
    server on its node. FleetManager.close stops it (and ends its actors, so that the next fleet has their GPUs)."""
    manager = FleetManager(
        fleet.settings,
        logs_dir,
        plan=None if fleet.on_ray else fleet.replicas,  # on Ray, Ray places the replicas
        placement_timeout_s=PLACEMENT_TIMEOUT_S,
    )
    try:
        manager.start(wait=True)
    except BaseException:
        manager.close()
        raise
    return manager


# ---- on Ray ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayNode:
    address: str
    hostname: str
    node_id: str
    cpus: float
    gpus: float

    def describe(self) -> str:
        return f"{self.address} ({self.cpus:g} CPU{'s' * (self.cpus != 1)}, {self.gpus:g} GPU{'s' * (self.gpus != 1)})"


@contextmanager
def bench_cluster(settings: StudioSettings) -> Iterator[None]:
    """The Ray of a bench on --cluster ray, for the whole bench: joined (or a local one started) once, left (a
    local one shut down with every worker) at the end where the bench was the one to join it. A Ray this process
    already uses (the studio's own fleet) is left as it is. Nothing where the fleets run on this machine."""
    joined = join_cluster(settings)
    try:
        yield
    finally:
        leave_cluster(joined)


def join_cluster(settings: StudioSettings) -> bool:
    """Joins the Ray of settings.ray_address (a local one on loopback without it) where --cluster ray asks for
    it and this process has none yet; True where it did (leave_cluster then leaves it). RayUnavailable says why
    it cannot."""
    if settings.cluster != "ray" or ray_cluster.current() is not None:
        return False
    if ray_cluster.import_ray().is_initialized():  # a caller's own Ray: used as it is, and left to it
        return False
    ray_cluster.connect(settings.ray_address)
    return True


def leave_cluster(joined: bool) -> None:
    if joined:
        ray_cluster.shutdown()


def ray_nodes(address: str | None) -> list[RayNode]:
    """The live nodes of the Ray at `address` (joined here where this process has none yet), with what each
    holds in all."""
    ray_cluster.connect(address)
    ray = ray_cluster.import_ray()
    return [
        RayNode(
            address=node["NodeManagerAddress"],
            hostname=node.get("NodeManagerHostname", ""),
            node_id=node["NodeID"],
            cpus=node["Resources"].get("CPU", 0.0),
            gpus=node["Resources"].get("GPU", 0.0),
        )
        for node in ray.nodes()
        if node.get("Alive")
    ]


def _asks(need: dict[str, float]) -> str:
    """What one replica asks Ray for, in words."""
    parts = [f"{need['num_gpus']:g} GPU{'s' * (need['num_gpus'] != 1)}"] if need["num_gpus"] else []
    parts.append(f"{need['num_cpus']:g} CPU{'s' * (need['num_cpus'] != 1)}")
    return " + ".join(parts)


def room(nodes: list[RayNode], need: dict[str, float]) -> int:
    """How many replicas asking `need` each the nodes hold at once: a replica's GPUs and CPUs are all on one node."""
    total = 0
    for node in nodes:
        fits = node.cpus // need["num_cpus"]  # every replica asks for one CPU at least
        if need["num_gpus"]:
            fits = min(fits, node.gpus // need["num_gpus"])
        total += int(fits)
    return total


def _where(address: str | None) -> str:
    return f"the Ray cluster at {address}" if address else "the local Ray"


def _nodes_text(nodes: list[RayNode]) -> str:
    shown = ", ".join(node.describe() for node in nodes[:NODES_SHOWN])
    more = f" and {len(nodes) - NODES_SHOWN} more" if len(nodes) > NODES_SHOWN else ""
    return f"{len(nodes)} node{'s' * (len(nodes) != 1)}: {shown}{more}" if nodes else "no live node"


def check_room(layout: Layout, settings: StudioSettings, nodes: list[RayNode]) -> dict[str, float]:
    """What each replica of the layout asks Ray for; LayoutError where the cluster's nodes cannot hold them all
    at once, whatever else runs there."""
    need = replica_resources(settings)
    fits = room(nodes, need)
    if fits < layout.replicas:
        lower = "the width" if need["num_gpus"] else "--engine-threads"
        raise LayoutError(
            f"layout {layout}: {layout.replicas} replica{'s' * (layout.replicas != 1)} of {_asks(need)} each "
            f"(all of a replica on one node); {_where(settings.ray_address)} holds {fits} "
            f"({_nodes_text(nodes)}): lower the replicas or {lower}, or add nodes to the cluster"
        )
    return need


def _plan_on_ray(settings: StudioSettings, config: BenchConfig) -> list[Fleet]:
    layouts = config.layouts or [settings_layout(settings)]
    for layout in layouts:  # width and engine rules first: they need no cluster
        layout_settings(settings, layout)
    nodes = ray_nodes(settings.ray_address)
    needs = {layout: check_room(layout, layout_settings(settings, layout), nodes) for layout in layouts}
    variants = variants_of(config.variants)
    check_variants(settings, variants)
    fleets = []
    for layout in layouts:
        for variant in variants:
            varied = with_engine_key(settings.model_copy(update={"extra_serve_args": serve_args(settings, variant)}))
            fleet_settings = layout_settings(varied, layout)
            # As ray_fleet gives each actor: Ray picks the GPUs and the node picks the port.
            one = fleet_settings.model_copy(update={"replicas": 1, "gpus": None, "server_port": None})
            replicas = [ReplicaPlan(index, None, one) for index in range(layout.replicas)]
            fleets.append(Fleet(layout, variant, fleet_settings, replicas, needs[layout]))
    return fleets


def placement(fleet: Fleet, servers: list[Replica]) -> dict[str, object]:
    """Where the fleet's replicas run, as the report keeps it: on Ray, each replica's node (its address, host name
    and Ray node id) and the GPUs Ray gave it there."""
    if not fleet.on_ray:
        return {}
    nodes = {node.address: node for node in ray_nodes(fleet.settings.ray_address)}
    replicas = []
    for index, server in enumerate(servers):
        address = urlsplit(server.base_url).hostname or ""
        node = nodes.get(address)
        replicas.append(
            {
                "replica": index,
                "node": address,
                "hostname": node.hostname if node else None,
                "node_id": node.node_id if node else None,
                "gpus": server.gpus,
            }
        )
    return {"nodes": replicas, "gpus": [server.gpus for server in servers]}


def cluster_record(settings: StudioSettings) -> dict[str, object]:
    """The cluster a bench's fleets ran on, as the report keeps it."""
    if settings.cluster != "ray":
        return {"kind": "local"}
    nodes = ray_nodes(settings.ray_address)
    return {
        "kind": "ray",
        "address": settings.ray_address or f"local ({ray_cluster.LOOPBACK})",
        "nodes": [
            {"address": n.address, "hostname": n.hostname, "node_id": n.node_id, "cpus": n.cpus, "gpus": n.gpus}
            for n in nodes
        ],
    }


def cluster_line(cluster: dict) -> str:
    """A cluster_record in one line: "Ray local (127.0.0.1): 1 node: 127.0.0.1 (2 CPUs, 0 GPUs)"."""
    nodes = [RayNode(n["address"], n["hostname"], n["node_id"], n["cpus"], n["gpus"]) for n in cluster["nodes"]]
    return f"Ray {cluster['address']}: {_nodes_text(nodes)}"


def placement_line(nodes: list[dict]) -> str:
    """A placement's nodes in one line: "replica 0 on 127.0.0.1, replica 1 on 10.0.0.2 (GPUs 0,1)"."""
    return "on Ray: " + ", ".join(
        f"replica {n['replica']} on {n['node']}" + (f" (GPUs {','.join(n['gpus'])})" if n.get("gpus") else "")
        for n in nodes
    )
