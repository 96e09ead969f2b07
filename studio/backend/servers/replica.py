"""Replica: what the studio relies on of one server of its fleet, wherever it runs.

A replica is a server process on this machine (supervisor.ManagedServer) or one inside a Ray actor on a node of a
cluster (ray_fleet.RayServer). The fleet manager starts, stops, restarts and watches it, the page shows its state,
node, GPUs and log, and both read its URL: this protocol names exactly those members, which both classes have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from studio.backend.servers.supervisor import ServerState, ServerStatus


class Replica(Protocol):
    """One server of the fleet: its identity and state as the page shows them, and its life cycle."""

    name: str  # how the page calls it ("replica 1"; "server" for a lone one)
    gpus: list[str] | None  # the GPUs it was given, to show; None where it has none of its own
    port: int | None  # None until it was first started
    state: ServerState
    exit_code: int | None

    @property
    def base_url(self) -> str:
        """http://host:port; raises RuntimeError before the first start."""
        ...

    @property
    def node(self) -> str | None:
        """The cluster node it runs on, in words; None on this machine."""
        ...

    def status(self) -> ServerStatus: ...

    def log_tail(self, lines: int = 50) -> list[str]: ...

    def crash_lines(self, limit: int = 5) -> list[str]:
        """The lines of its log that explain why it ended."""
        ...

    def on_exit(self, callback: Callable[[Replica], None]) -> None:
        """`callback` is called (from another thread) when the server dies without being asked to stop."""
        ...

    def start(self, wait: bool = True, same_port: bool = False) -> None: ...

    def wait_ready(self, timeout_s: float | None = None) -> None: ...

    def stop(self, grace_s: float = 15.0) -> int | None: ...

    def restart(self, wait: bool = True, same_port: bool = False) -> None: ...
