"""Fleet layouts a bench compares: REPLICASxWIDTH, e.g. `1x4,2x2,4x1` on four GPUs.

A layout is K replicas side by side, each W wide. For vLLM-Omni the width is its tensor parallel size (a replica
then holds W x cfg parallel x ulysses GPUs); for the embedded engine it is the engine's own parallelism, one
request on W devices: the guidance halves on two (cfg parallel 2) and the tokens split across the rest (Ulysses),
e.g. width 2 = cfg 2, width 4 = cfg 2 x ulysses 2, width 3 = ulysses 3. Every layout is checked against the GPUs (from --gpus, or every GPU found) before any server of
the bench starts, by the same planner the studio's fleet uses (studio.backend.servers.local_fleet.plan_fleet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.backend.engine_kinds import ReplicaShape, engine_kind
from studio.config import StudioSettings

if TYPE_CHECKING:
    from studio.backend.servers.local_fleet import ReplicaPlan

# A sanity bound: a node has at most a few dozen GPUs, and each replica is a process of its own.
MAX_REPLICAS = 64
MAX_WIDTH = 64
_LAYOUT = re.compile(r"^(\d+)\s*[xX]\s*(\d+)$")
SYNTAX = "layouts take REPLICASxWIDTH separated by commas, e.g. 1x4,2x2,4x1"
# The pipelines whose requests the embedded engine spreads over several devices (studio.engine.loader's own loop).
SPREADING_PIPELINES = ("WanPipeline",)


class LayoutError(ValueError):
    """A layout that cannot run as asked, said in one line that names it."""


@dataclass(frozen=True)
class Layout:
    """K replicas, each `width` wide."""

    replicas: int
    width: int

    def __str__(self) -> str:
        return f"{self.replicas}x{self.width}"


def parse_layout(text: str) -> Layout:
    match = _LAYOUT.match(text.strip())
    if match is None:
        raise LayoutError(f"{SYNTAX}; got {text.strip()!r}")
    replicas, width = int(match.group(1)), int(match.group(2))
    if not 1 <= replicas <= MAX_REPLICAS:
        raise LayoutError(f"layout {text.strip()}: replicas must be between 1 and {MAX_REPLICAS}")
    if not 1 <= width <= MAX_WIDTH:
        raise LayoutError(f"layout {text.strip()}: width must be between 1 and {MAX_WIDTH}")
    return Layout(replicas, width)


def parse_layouts(value: Any) -> list[Layout]:
    """Layouts from comma-separated text or a list (of text or Layouts); none given is an empty list."""
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else (value or [])
    layouts: list[Layout] = []
    for item in items:
        if isinstance(item, str) and not item.strip():
            continue
        layout = item if isinstance(item, Layout) else parse_layout(str(item))
        if layout in layouts:
            raise LayoutError(f"layout {layout} is listed twice")
        layouts.append(layout)
    return layouts


def _shape(settings: StudioSettings) -> ReplicaShape:
    shape = engine_kind(settings).replica
    if shape is None:
        raise LayoutError(
            f"layouts and variants are fleets the bench starts; the {settings.engine} engine attaches to servers "
            "that already run (use --engine vllm-omni or embedded)"
        )
    return shape


def settings_layout(settings: StudioSettings) -> Layout:
    """The layout the settings ask for: --replicas x what a layout's width sets (vLLM-Omni: --tp; the embedded
    engine: its cfg parallel x ulysses)."""
    return Layout(settings.replicas, _shape(settings).layout_width(settings))


def layout_settings(settings: StudioSettings, layout: Layout) -> StudioSettings:
    """The settings of a fleet of this layout: what the studio's own fleet would run with them."""
    shape = _shape(settings)
    if shape.wide_needs_wan and layout.width > 1:
        _check_spreads(settings, layout)
    return settings.model_copy(update={"replicas": layout.replicas, **shape.layout_update(layout.width)})


def _check_spreads(settings: StudioSettings, layout: Layout) -> None:
    """The embedded engine runs one request on several devices in its own loop, which drives Wan pipelines: a
    model folder that names another pipeline is refused before anything starts (a hub id is left to the start)."""
    index = Path(settings.model) / "model_index.json"
    try:
        pipeline = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError):
        return
    if pipeline not in SPREADING_PIPELINES:
        raise LayoutError(
            f"layout {layout}: the embedded engine runs one request on several devices for Wan pipelines "
            f"({', '.join(SPREADING_PIPELINES)}); {settings.model} is a {pipeline}: use width 1, e.g. "
            f"{layout.replicas * layout.width}x1, or a Wan model"
        )


def plan_layout(settings: StudioSettings, layout: Layout, found: list[str] | None = None) -> list[ReplicaPlan]:
    """The replicas of a layout with their GPUs; LayoutError where the GPUs cannot hold it. `found`: the
    machine's GPUs (default: every GPU found)."""
    # Imported here: the bench's form parses layouts at the CLI's start-up, which stays light.
    from studio.backend.servers.launchers import LaunchError
    from studio.backend.servers.local_fleet import plan_fleet

    try:
        return plan_fleet(layout_settings(settings, layout), found)
    except LaunchError as exc:
        raise LayoutError(f"layout {layout}: {exc}") from None
