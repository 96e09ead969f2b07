"""The fleets a bench compares: every layout x variant, each planned (GPUs, serve args) and checked before any
server starts, then started one after the other by the studio's own fleet code (studio.backend.fleet), so
that what the bench measures is what the studio runs when the layout is applied."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from studio.backend.bench_config import BenchConfig
from studio.backend.fleet import Replica, cpu_cores, gpus_found, managed_fleet
from studio.backend.layouts import Layout, layout_settings, plan_layout, settings_layout
from studio.backend.supervisor import ManagedServer
from studio.backend.variants import Variant, check_variants, serve_args, variants_of
from studio.config import StudioSettings


@dataclass(frozen=True)
class Fleet:
    """One layout with one variant, as the bench starts it."""

    layout: Layout
    variant: Variant
    settings: StudioSettings  # the fleet's own: replicas, width, extra serve args
    replicas: list[Replica]  # each with its GPUs (None on a CPU)

    @property
    def label(self) -> str:
        return f"{self.layout} {self.variant}"

    @property
    def slug(self) -> str:
        """The label as a folder name (the fleet's logs)."""
        return re.sub(r"[^\w.-]+", "_", self.label)

    @property
    def gpus(self) -> list[str]:
        return [gpu for replica in self.replicas for gpu in (replica.gpus or [])]

    @property
    def device_kind(self) -> str:
        return "GPU" if self.gpus else "CPU core"

    @property
    def devices(self) -> int:
        """What the fleet holds of the machine: its GPUs, or on a CPU the cores its replicas' threads use."""
        if self.gpus:
            return len(self.gpus)
        cores = cpu_cores()
        used = sum(replica.settings.engine_threads or cores for replica in self.replicas)
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
            "gpus": [replica.gpus for replica in self.replicas],
            "engine_threads": [replica.settings.engine_threads for replica in self.replicas],
            "devices": self.devices,
            "device_kind": self.device_kind,
        }


def plan_bench(settings: StudioSettings, config: BenchConfig, found: list[str] | None = None) -> list[Fleet]:
    """Every fleet of the bench, layout by layout, each layout with every variant. Raises LayoutError or
    VariantError, naming the layout, variant or flag, before anything starts. `found`: the machine's GPUs
    (default: every GPU found)."""
    layouts = config.layouts or [settings_layout(settings)]
    found = gpus_found() if found is None else found
    for layout in layouts:  # the cheap checks first: a variant's may read a server's help for seconds
        plan_layout(settings, layout, found)
    variants = variants_of(config.variants)
    check_variants(settings, variants)
    fleets = []
    for layout in layouts:
        for variant in variants:
            varied = settings.model_copy(update={"extra_serve_args": serve_args(settings, variant)})
            replicas = plan_layout(varied, layout, found)
            fleets.append(Fleet(layout, variant, layout_settings(varied, layout), replicas))
    return fleets


def start_fleet(fleet: Fleet, logs_dir: Path) -> list[ManagedServer]:
    """The fleet's servers, side by side, once every one answers /health; on a failure none is left running."""
    servers = managed_fleet(fleet.settings, logs_dir, fleet.replicas)
    try:
        for server in servers:
            server.start(wait=False)
        for server in servers:
            server.wait_ready()
    except BaseException:
        stop_fleet(servers)
        raise
    return servers


def stop_fleet(servers: list[ManagedServer]) -> None:
    for server in servers:
        server.stop()
