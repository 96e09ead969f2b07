"""Fleet layouts a bench compares: REPLICASxWIDTH, e.g. `1x4,2x2,4x1` on four GPUs.

A layout is K replicas side by side, each W wide. For vLLM-Omni the width is its tensor parallel size (a replica
then holds W x cfg parallel x ulysses GPUs); the embedded engine runs a request on one device, so its layouts
take width 1. Every layout is checked against the GPUs (from --gpus, or every GPU found) before any server of
the bench starts, by the same planner the studio's fleet uses (studio.backend.fleet.plan_fleet).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from studio.config import StudioSettings

if TYPE_CHECKING:
    from studio.backend.fleet import Replica

# A sanity bound: a node has at most a few dozen GPUs, and each replica is a process of its own.
MAX_REPLICAS = 64
MAX_WIDTH = 64
_LAYOUT = re.compile(r"^(\d+)\s*[xX]\s*(\d+)$")
SYNTAX = "layouts take REPLICASxWIDTH separated by commas, e.g. 1x4,2x2,4x1"


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


def settings_layout(settings: StudioSettings) -> Layout:
    """The layout the settings ask for: --replicas x --tp (the embedded engine: width 1)."""
    width = settings.tensor_parallel_size if settings.engine == "vllm-omni" else 1
    return Layout(settings.replicas, width)


def layout_settings(settings: StudioSettings, layout: Layout) -> StudioSettings:
    """The settings of a fleet of this layout: what the studio's own fleet would run with them."""
    if settings.engine == "remote":
        raise LayoutError(
            "layouts and variants are fleets the bench starts; the remote engine attaches to servers that already "
            "run (use --engine vllm-omni or embedded)"
        )
    if settings.engine == "embedded" and layout.width != 1:
        raise LayoutError(
            f"layout {layout}: the embedded engine runs each request on one device (it has no tensor "
            f"parallelism), so its layouts take width 1, e.g. {layout.replicas * layout.width}x1; "
            "a wider replica needs --engine vllm-omni"
        )
    update: dict[str, object] = {"replicas": layout.replicas}
    if settings.engine == "vllm-omni":
        update["tensor_parallel_size"] = layout.width
    return settings.model_copy(update=update)


def plan_layout(settings: StudioSettings, layout: Layout, found: list[str] | None = None) -> list[Replica]:
    """The replicas of a layout with their GPUs; LayoutError where the GPUs cannot hold it. `found`: the
    machine's GPUs (default: every GPU found)."""
    # Imported here: the bench's form parses layouts at the CLI's start-up, which stays light.
    from studio.backend.fleet import plan_fleet
    from studio.backend.launchers import LaunchError

    try:
        return plan_fleet(layout_settings(settings, layout), found)
    except LaunchError as exc:
        raise LayoutError(f"layout {layout}: {exc}") from None
