"""The fleet: the only way the studio's servers start, for the page, `generate` and `bench` alike.

A managed fleet (the embedded engine, `vllm serve --omni`) is planned from the settings (replicas x width on the
GPUs NVML finds, or on a Ray cluster), made one replica at a time by a ReplicaMaker (local_fleet.LocalReplicas or
ray_fleet.RayReplicas), started side by side and watched. An attached fleet (remote vLLM-Omni servers, Cosmos
Framework) is its URLs. Either way the manager owns the endpoint pool the runs send to. Making one and launching
it loads no HTTP client: `generate` sets its fleet starting before it imports the rest of the studio.

While it serves, the manager adds and takes out replicas (by hand from the Server tab, or with the load where
--replicas-min/--replicas-max ask for it), restarts a crashed replica where auto-restart allows, and tells its
owner (FleetHooks) what the runs must know: an endpoint went down with a reason, the number of replicas taking
work changed, and how many requests wait for one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from studio.backend.engine_kinds import EngineKind, engine_kind, with_engine_key
from studio.backend.servers.autoscale import (
    CHECK_INTERVAL_S,
    Autoscaler,
    FleetLoad,
    ReplicaLoad,
    ScalingHooks,
    ScalingLoop,
    ScalingPolicy,
)
from studio.backend.servers.local_fleet import LocalReplicas, ReplicaMaker, ReplicaPlan
from studio.backend.servers.replica import Replica
from studio.backend.servers.supervisor import ServerState, ServerStatus
from studio.config import ScalingSettings, StudioSettings

if TYPE_CHECKING:
    from studio.backend.clients.router import EndpointPool

log = logging.getLogger(__name__)

# The page's field and the CLI's flag that give remote servers: a message about them names both.
REMOTE_URLS_WHERE = "the Server tab's 'Remote URLs', or --url"
# How often a replica taken out is looked at for requests still outstanding there.
DRAIN_POLL_S = 0.2


def _nothing_waits() -> int:
    return 0


def _ignore_endpoint(url: str, reason: str, started_only: bool) -> None:
    return None


def _ignore_capacity(replicas: int) -> None:
    return None


@dataclass
class FleetHooks:
    """What the fleet tells its owner, and asks of it. The defaults suit a fleet no run shares (a bench's).

    endpoint_down(url, reason, started_only): a replica went down (crashed, or taken out by an operator); the runs
    fail what it had started with the reason, and with started_only also send what it only queued elsewhere.
    capacity(replicas): the number of replicas taking work changed (the studio's in-flight slots follow it).
    waiting(): requests waiting in the studio that another replica could take now (the autoscaler's queue)."""

    endpoint_down: Callable[[str, str, bool], None] = _ignore_endpoint
    capacity: Callable[[int], None] = _ignore_capacity
    waiting: Callable[[], int] = _nothing_waits


def _whereabouts(server: Replica) -> str:
    """Where a replica runs, as far as it says: ' on node 10.0.0.5 (1a2b3c4d), GPUs 0,1'."""
    parts = [f"node {server.node}"] if server.node else []
    if server.gpus:
        parts.append(f"GPUs {','.join(server.gpus)}")
    return f" on {', '.join(parts)}" if parts else ""


@dataclass
class _RestartBudget:
    """At most `most` automatic restarts within `window_s`, so that a server that dies at every start is not
    restarted for ever."""

    most: int
    window_s: float
    used: deque[float] = field(default_factory=deque)

    def take(self) -> str | None:
        """None where a restart may go ahead (and counts it); else why not."""
        now = time.monotonic()
        while self.used and now - self.used[0] > self.window_s:
            self.used.popleft()
        if len(self.used) >= self.most:
            return f"not restarted: {len(self.used)} automatic restarts within {self.window_s:.0f} s already"
        self.used.append(now)
        return None


class FleetManager:
    """The studio's servers: planned, started, stopped, grown and shrunk, restarted, and reached through one pool.

    `plan`: the replicas and their GPUs where the caller planned them already (a bench's layout); by default the
    settings' own plan. `servers`: servers made already, to adopt as the fleet (a caller's own). `placement_timeout_s`:
    how long a start waits for Ray to place every replica (None: no wait, each replica starts once Ray places it)."""

    def __init__(
        self,
        settings: StudioSettings,
        logs_dir: Path,
        hooks: FleetHooks | None = None,
        *,
        plan: list[ReplicaPlan] | None = None,
        servers: list[Replica] | None = None,
        placement_timeout_s: float | None = None,
    ):
        self.settings = settings
        self.kind: EngineKind = engine_kind(settings)
        self.logs_dir = logs_dir
        self.hooks = hooks or FleetHooks()
        self.auto_restart = settings.auto_restart  # the operator may turn it on or off while the fleet serves
        self._plan = plan
        self._placement_timeout_s = placement_timeout_s
        self.servers: list[Replica] = list(servers or [])  # ManagedServer, or RayServer on Ray
        self.layout: str | None = None  # "2 x TP4 on GPUs 0-7", once the fleet is planned
        self.pool: EndpointPool | None = None
        # The pool of the fleet this one replaces (the controller's, at an operator's restart with new settings):
        # handed over to this fleet's pool once it is made, so that requests waiting on the old servers come here.
        self.predecessor: EndpointPool | None = None
        self.served_model: str | None = None  # what the servers say they serve (GET /v1/models), once attached
        self.start_error: str | None = None
        self.auto_restart_note: str | None = None  # the last auto-restart, for the page
        self.scaling: ScalingLoop | None = None  # adds and takes out replicas with the load (settings.scales)
        self.autoscale_interval_s = CHECK_INTERVAL_S
        # The key the managed servers were started with where the user gave none (a new one at each new fleet).
        self._engine_key: SecretStr | None = None
        self._replicas: ReplicaMaker | None = None
        self._restarts = _RestartBudget(settings.max_auto_restarts, settings.restart_window_s)
        self._lock = threading.Lock()
        self._scaling_lock = threading.Lock()  # a replica joins the fleet, or the fleet stops: one at a time
        self._starter: threading.Thread | None = None
        for server in self.servers:
            server.on_exit(self._server_exited)

    @property
    def managed(self) -> bool:
        return self.kind.managed

    @property
    def server(self) -> Replica | None:
        """The first replica: the one server of a fleet of one."""
        return self.servers[0] if self.servers else None

    def server_status(self) -> ServerStatus | None:
        return self.server.status() if self.server else None

    # ---- the clients ------------------------------------------------------------------------------
    def api_key(self) -> str | None:
        """The key the studio's clients send: the user's, else the one the managed servers were started with."""
        given = self.settings.api_key_value()
        if given or not self.managed or self._engine_key is None:
            return given
        return self._engine_key.get_secret_value()

    def client_options(self) -> dict[str, Any]:
        """What every client of this fleet's servers is made with (the pool's, and a follow-up's of earlier ones)."""
        return {
            "api_key": self.api_key(),
            "client_class": self.kind.client_class,
            "http_timeout_s": self.settings.http_timeout_s,
            "poll_interval_s": self.settings.poll_interval_s,
        }

    def _endpoint_options(self) -> dict[str, Any]:
        """client_options without the client class: what the pool's add and replace take (the pool knows it)."""
        options = self.client_options()
        options.pop("client_class")
        return options

    # ---- start and stop ---------------------------------------------------------------------------
    def launch(self) -> list[Replica]:
        """Plan the managed fleet (first call only) and set every replica starting, side by side; returns at once.
        Raises LaunchError where the GPUs cannot hold the layout, ServerStartError where a server cannot start."""
        with self._lock:
            if not self.servers:
                keyed = with_engine_key(self.settings)
                self._engine_key = keyed.api_key if self.settings.api_key is None else None
                self._replicas = self._replica_maker(keyed)
                self.layout = self._replicas.layout
                self.servers = [self._replicas.new() for _ in range(self.settings.replicas)]
                for replica in self.servers:
                    replica.on_exit(self._server_exited)
                self.scaling = self._scaling_loop()
            servers = list(self.servers)
        self._wait_placed(servers)
        for server in servers:
            if server.state not in (ServerState.STARTING, ServerState.READY):  # else started already
                server.start(wait=False)
        return servers

    def start(self, wait: bool = True) -> None:
        """Start the managed fleet (or attach to the remote servers) and build the endpoint pool. With `wait`,
        returns once every replica answers (ServerStartError where one does not)."""
        self.start_error = None
        if not self.managed:
            if not self.settings.remote_urls:
                raise ValueError(f"{self.kind.label}: give at least one server URL ({REMOTE_URLS_WHERE})")
            from studio.backend.clients.base import server_root

            self._attach([server_root(url) for url in self.settings.remote_urls])
            return
        servers = self.launch()
        if wait:
            for server in servers:
                server.wait_ready()
        self._attach([server.base_url for server in servers])
        if self.scaling is not None:
            self.scaling.start()

    def _wait_placed(self, servers: list[Replica]) -> None:
        """On Ray: every replica placed before any starts (ServerStartError where Ray has no room for one)."""
        if self._replicas is None or self._placement_timeout_s is None:
            return  # else each replica starts once placed, as Ray finds room
        deadline = time.monotonic() + self._placement_timeout_s
        for server in servers:
            self._replicas.wait_placed(server, timeout_s=max(0.0, deadline - time.monotonic()))

    def _replica_maker(self, settings: StudioSettings) -> ReplicaMaker:
        if settings.cluster == "ray":
            # Imported here: Ray is an optional extra, and a fleet on one machine never loads it.
            from studio.backend.servers.ray_fleet import RayReplicas

            return RayReplicas(settings, self.logs_dir)
        return LocalReplicas(settings, self.logs_dir, plan=self._plan)

    def _attach(self, urls: list[str]) -> None:
        # Imported here: the HTTP stack is heavy, and `generate` sets the fleet starting before it loads it.
        from studio.backend.clients.router import EndpointPool

        options = self.client_options()
        pool = EndpointPool.from_urls(urls, **options)
        self.served_model = next(iter(pool.served_models()), None)
        previous, self.predecessor = self.pool or self.predecessor, None
        self.pool = pool
        if previous is not None:
            previous.hand_over(pool)
        self.hooks.capacity(len(urls))

    def start_in_background(self) -> None:
        """Start once, off the caller's thread (the page stays usable and shows the engine starting)."""
        with self._lock:
            if self._starter is not None:
                return
            self._starter = threading.Thread(target=self._start_logged, name="engine-start", daemon=True)
            self._starter.start()

    def _start_logged(self) -> None:
        try:
            self.start()
        except Exception as exc:  # shown in the page through start_error
            self.start_error = str(exc)
            log.error("engine start failed: %s", exc)

    @property
    def starting(self) -> bool:
        """The fleet is on its way up (or about to be): worth waiting for."""
        if self.start_error is not None:
            return False
        if self._starter is not None and self._starter.is_alive():
            return True  # a start under way, also of servers that are still stopped from before
        if self.managed:
            states = [server.state for server in self.servers]
            if ServerState.READY in states:
                return self.pool is None
            return not states or ServerState.STARTING in states
        return self.pool is None

    def ready(self) -> bool:
        if not self.managed:
            return self.pool is not None
        # A fleet takes work while any replica does: the router sends it there.
        return self.pool is not None and any(server.state is ServerState.READY for server in self.servers)

    def stop(self) -> None:
        """Stop every server (kept, to start again on the same ports); nothing joins the fleet after this."""
        scaling = self.scaling
        if scaling is not None:
            with self._scaling_lock:
                scaling.stopped.set()
        for server in self.servers:
            server.stop()
        if scaling is not None:
            scaling.stop()  # an add under way gives up once its server is stopped
        with self._lock:
            self._starter = None  # a later start_in_background starts again

    def close(self) -> None:
        """Stop the fleet for good: its servers stop and, on Ray, their actors end, so that the GPUs go back."""
        self.stop()
        servers, self.servers = self.servers, []
        for server in servers:
            if self._replicas is not None:
                self._replicas.retire(server)
            else:
                end_actor = getattr(server, "end_actor", None)  # adopted Ray replicas end theirs too
                if end_actor is not None:
                    end_actor()
        self.pool = None

    # ---- one replica ------------------------------------------------------------------------------
    def replica(self, index: int) -> Replica:
        if not 0 <= index < len(self.servers):
            raise ValueError(f"no replica {index}: this studio runs {len(self.servers)} (0 to {len(self.servers) - 1})")
        return self.servers[index]

    def _take_out(self, index: int, reason: str) -> Replica:
        """Before a replica goes down on purpose: no new work for it, what it runs fails with the reason, and
        what it only queued is sent to the other replicas (or waits for it, where none is up)."""
        server = self.replica(index)
        if self.pool is not None and server.port:
            self.pool.mark_exited(server.base_url)
            self.hooks.endpoint_down(server.base_url, f"replica {index} {reason}", True)
        return server

    def stop_replica(self, index: int) -> None:
        """Stop one replica; the rest of the fleet keeps serving."""
        self._take_out(index, "was stopped by an operator").stop()

    def restart_replica(self, index: int) -> None:
        """Start one replica again (on its port where free) and give it work once it answers."""
        server = self._take_out(index, "was restarted by an operator")
        url = server.base_url if server.port else None
        server.restart(wait=True, same_port=True)
        if self.pool is None:
            return
        if url and server.base_url != url:
            self.pool.replace_url(url, server.base_url, **self._endpoint_options())
        self.pool.mark_restarted(server.base_url, ok=True)

    # ---- a fleet that follows its load ------------------------------------------------------------
    def _scaling_loop(self) -> ScalingLoop | None:
        if not self.settings.scales:
            return None
        policy = ScalingPolicy.of(self.settings.part(ScalingSettings))
        hooks = ScalingHooks(read=self.load, add=self._add_replica, remove=self._remove_replica)
        return ScalingLoop(Autoscaler(policy), hooks, interval_s=self.autoscale_interval_s)

    def load(self) -> FleetLoad:
        """The queue as the autoscaler sees it: requests waiting that could be sent now, and each replica's."""
        pool = self.pool
        endpoints = {ep.url: ep for ep in pool.endpoints} if pool is not None else {}
        replicas = []
        for server in self.servers:
            endpoint = endpoints.get(server.base_url) if server.port else None
            takes_work = endpoint is not None and endpoint.healthy and not endpoint.retiring
            replicas.append(
                ReplicaLoad(
                    name=server.name,
                    in_flight=endpoint.outstanding if endpoint is not None else 0,
                    serving=server.state is ServerState.READY and takes_work,
                    starting=server.state is ServerState.STARTING,
                )
            )
        return FleetLoad(waiting=self.hooks.waiting(), replicas=tuple(replicas))

    def _add_replica(self, cancelled: threading.Event) -> str:
        """One more replica: placed (by Ray, where the fleet is on Ray), started, and given work once it answers."""
        assert self._replicas is not None and self.pool is not None
        began = time.monotonic()
        server = self._replicas.new()
        try:
            if not self._replicas.wait_placed(server, cancelled):
                raise RuntimeError("called off: the fleet stops")
            placed = time.monotonic()
            with self._scaling_lock:
                if cancelled.is_set():
                    raise RuntimeError("called off: the fleet stops")
                server.on_exit(self._server_exited)
                self.servers = [*self.servers, server]  # a new list: readers of the old one see a whole fleet
                server.start(wait=False)
            server.wait_ready()
            self.pool.add(server.base_url, **self._endpoint_options())
        except BaseException:
            self._drop_replica(server)
            raise
        self.hooks.capacity(self.pool.taking_work)
        placing = f" ({placed - began:.1f} s for Ray to place it)" if self.settings.cluster == "ray" else ""
        return (
            f"{server.name} serving at {server.base_url}{_whereabouts(server)}, "
            f"{time.monotonic() - began:.1f} s after the decision{placing}"
        )

    def _remove_replica(self, name: str, cancelled: threading.Event) -> str:
        """Take a replica out: no new work goes there, what it has finishes, then it stops (on Ray its actor ends
        too, and Ray has its GPUs back)."""
        assert self._replicas is not None and self.pool is not None
        server = next((server for server in self.servers if server.name == name), None)
        if server is None or not server.port:
            raise ValueError(f"no {name} serving in the fleet")
        url = server.base_url
        endpoint = self.pool.retire(url)
        self.hooks.capacity(self.pool.taking_work)
        # Normally there is nothing to wait for (it was idle), unless a request reached it as it was chosen.
        while endpoint.outstanding and not cancelled.wait(DRAIN_POLL_S):
            pass
        if endpoint.outstanding:
            raise RuntimeError(f"called off: the fleet stops while {name} still has {endpoint.outstanding} requests")
        self.pool.remove(url)
        self._drop_replica(server)
        return f"{name} at {url} stopped" + (" and its Ray actor ended" if self.settings.cluster == "ray" else "")

    def _drop_replica(self, server: Replica) -> None:
        with self._scaling_lock:
            self.servers = [other for other in self.servers if other is not server]
        if self._replicas is not None:
            self._replicas.retire(server)

    # ---- crashes ----------------------------------------------------------------------------------
    def _server_exited(self, server: Replica) -> None:
        """Called from the server's exit watcher when it dies on its own."""
        tail = " | ".join(server.crash_lines(5))  # what explains the crash, not the start-up banner
        reason = f"the server crashed (exit code {server.exit_code})" + (f": {tail}" if tail else "")
        url = server.base_url
        restart = self._may_auto_restart()
        others = self.pool is not None and self.pool.others_healthy(url)
        if self.pool is not None:
            self.pool.mark_exited(url)  # before anything else: no new work goes there
            if restart:
                self.pool.mark_restarting(url)  # requests now wait for it
        # With a restart coming, what the server only queued is sent again once it is back; with other replicas
        # up, it is sent to them at once. What it had started fails with the reason.
        self.hooks.endpoint_down(url, reason, restart or others)
        if restart:
            threading.Thread(target=self._auto_restart, args=(server, reason), name="auto-restart", daemon=True).start()

    def _may_auto_restart(self) -> bool:
        if not (self.managed and self.auto_restart):
            return False
        refusal = self._restarts.take()
        if refusal is not None:
            self.auto_restart_note = refusal
            log.error("server crashed again; %s", refusal)
            return False
        return True

    def _auto_restart(self, server: Replica, reason: str) -> None:
        url = server.base_url
        log.warning("restarting the server after: %s", reason)
        try:
            server.restart(wait=True, same_port=True)
        except Exception as exc:
            self.auto_restart_note = f"automatic restart failed: {exc}"
            log.error("%s", self.auto_restart_note)
            if self.pool is not None:
                self.pool.mark_restarted(url, ok=False)
            return
        if server.base_url != url and self.pool is not None:
            # Its old port was taken meanwhile: the pool follows it to the new one.
            self.pool.replace_url(url, server.base_url, **self._endpoint_options())
            url = server.base_url
        self.auto_restart_note = f"restarted automatically at {time.strftime('%H:%M:%S')} after: {reason}"
        log.info("server back at %s", url)
        if self.pool is not None:
            self.pool.mark_restarted(url, ok=True)
