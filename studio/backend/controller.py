"""The studio's back end as one object: the engine it manages (or the servers it attaches to), the
endpoint pool, the output store and the runs. The CLI and the page both drive this; it imports no UI.

A managed fleet is made one replica at a time (on this machine, or as Ray actors); with --replicas-min and
--replicas-max a loop adds and takes out replicas as the queue asks (autoscale.py), while runs go on. Where the user
gave no API key, a managed fleet gets a random one at each start (config.with_engine_key), so that its servers
answer the studio alone.

What an earlier studio left at servers is followed up as the studio starts (start), on an event loop of the
controller's own: whoever's loop the page or the CLI runs, nothing waits for a page to open.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from tenacity import AsyncRetrying, retry_if_result, wait_fixed

from studio.backend.clients.router import EndpointPool
from studio.backend.clients.vllm_omni import load_sdk, server_root
from studio.backend.engine_kinds import EngineKind, RunDefaults, engine_kind
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.fair_share import SLOTS_PER_SERVER, FairShare, Standing, VisitorLimitExceeded
from studio.backend.runs.recovery import leftovers_to_follow
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.autoscale import (
    CHECK_INTERVAL_S,
    Autoscaler,
    FleetLoad,
    ReplicaLoad,
    ScalingHooks,
    ScalingLoop,
    ScalingPolicy,
)
from studio.backend.servers.local_fleet import LocalReplicas, ReplicaMaker
from studio.backend.servers.supervisor import ManagedServer, ServerState, ServerStatus
from studio.backend.visitors import LOCAL_OPERATOR, OpenPages, Visitor
from studio.config import StudioSettings, with_engine_key

log = logging.getLogger(__name__)

HOUR_S = 3600.0
# The page's field and the CLI's flag that give remote servers: a message about them names both.
REMOTE_URLS_WHERE = "the Server tab's 'Remote URLs', or --url"


# How often a replica taken out is looked at for requests still outstanding there.
DRAIN_POLL_S = 0.2


def _whereabouts(server: ManagedServer) -> str:
    """Where a replica runs, as far as it says: ' on node 10.0.0.5 (1a2b3c4d), GPUs 0,1'."""
    node = getattr(server, "node", None)
    parts = [f"node {node}"] if node else []
    if server.gpus:
        parts.append(f"GPUs {','.join(server.gpus)}")
    return f" on {', '.join(parts)}" if parts else ""


# What the operator may change while the studio serves: how visitors share the servers, and how large a run may be.
SHARING_FIELDS = (
    "in_flight_slots",
    "visitor_max_in_flight",
    "visitor_max_queued",
    "visitor_max_videos_per_hour",
    "cancel_unsent_on_close",
    "max_run_requests",
)


class RunTooLarge(RuntimeError):
    """A run of more requests than max_run_requests (operators' runs too); the message names the setting."""


def _model_name(served: str) -> str:
    """A served model as a visitor may see it: its last name, not the folder or hub path it was loaded from."""
    return served.rstrip("/").rsplit("/", 1)[-1] or served


# Event loops of closed controllers, stopped with the follow-ups they still held: kept, so that those are neither run
# further nor collected (either would settle requests that the next studio is to follow up from history).
_STOPPED_LOOPS: list[asyncio.AbstractEventLoop] = []


_SDK_LOCK = threading.Lock()


def _load_sdk() -> None:
    """load_sdk, one thread at a time: the SDK is a lazily loaded module, which two threads must not load at once
    (the second sees it half made)."""
    with _SDK_LOCK:
        load_sdk()


class _OwnLoop:
    """An event loop of the controller's own, on a daemon thread: for the work it starts by itself (the follow-up of
    an earlier studio's requests), whichever loop the page or the CLI runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="studio-follow-up", daemon=True)
        self._thread.start()

    def submit(self, work: Coroutine[Any, Any, int]) -> concurrent.futures.Future[int]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def stop(self) -> None:
        """Stops it where it is: what it still follows stays as history has it, for the next studio to follow up."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        _STOPPED_LOOPS.append(self.loop)


class StudioController:
    def __init__(
        self,
        settings: StudioSettings,
        store: OutputStore | None = None,
        server: ManagedServer | None = None,
    ):
        """`store` and `server`: ones the caller made already (the CLI starts the engine before it imports
        the rest of the studio); by default the controller makes its own fleet from the settings."""
        self.settings = settings
        self.store = store or OutputStore(Path(settings.outputs_dir))
        # The managed replicas (one unless settings.replicas says more), each on its own GPUs and port.
        self.servers: list[ManagedServer] = [server] if server is not None else []  # RayServer: the same interface
        self.layout: str | None = None  # "2 x TP4 on GPUs 0-7", once the fleet is planned
        self.pool: EndpointPool | None = None
        self.board = RequestBoard()
        # One dispatcher for every run: the studio's in-flight slots, shared fairly across visitors.
        self.dispatcher = FairShare(self._slot_count(len(settings.remote_urls) or 1), settings.visitor_max_in_flight)
        self.open_pages = OpenPages()  # whose pages are open: the last one closing cancels what they had not sent
        self.served_model: str | None = None  # what the servers say they serve (GET /v1/models), once attached
        self._lock = threading.Lock()
        self._starter: threading.Thread | None = None
        self.start_error: str | None = None
        lost = self.store.mark_unfinished_lost()
        if lost:
            log.warning("%d requests of an earlier studio never reached a server; marked lost", lost)
        # What an earlier studio left at servers, read before this one sends anything: followed up as it starts
        # (resume_unfinished), never mixed with this studio's own requests in flight by then.
        self._leftovers = self.store.resumable()
        self._follow_up: concurrent.futures.Future[int] | None = None
        self._follow_up_lock = threading.Lock()
        self._own_loop: _OwnLoop | None = None
        # The key a managed fleet was started with where the user gave none (made at each start of a fleet).
        self._engine_key: SecretStr | None = None
        self._auto_restarts: deque[float] = deque()  # when the studio restarted a crashed server itself
        self.auto_restart_note: str | None = None  # the last auto-restart, for the page
        self._replicas: ReplicaMaker | None = None  # makes and ends the managed fleet's replicas
        # Adds and takes out replicas with the load (settings.scales); made with the fleet.
        self.scaling: ScalingLoop | None = None
        self.autoscale_interval_s = CHECK_INTERVAL_S
        self._scaling_lock = threading.Lock()  # a replica joins the fleet, or the fleet stops: one at a time
        if server is not None:
            server.on_exit(self._server_exited)

    @property
    def server(self) -> ManagedServer | None:
        """The first replica: the one server of a studio that runs one."""
        return self.servers[0] if self.servers else None

    @property
    def kind(self) -> EngineKind:
        """The record of the engine the settings name (they change with apply_settings)."""
        return engine_kind(self.settings)

    @property
    def managed(self) -> bool:
        return self.kind.managed

    def _slot_count(self, servers: int) -> int:
        return self.settings.in_flight_slots or SLOTS_PER_SERVER * servers

    def start(self, wait: bool = True) -> None:
        """Start the managed server (or attach to remote ones) and build the endpoint pool. The SDK client is
        warmed meanwhile, so that the first request does not count its import as queue wait. What an earlier studio
        left at servers is followed up meanwhile (once per studio process)."""
        self.start_error = None
        self._begin_follow_up()  # it needs no server of this studio's (and loads the SDK first, as below)
        with self._lock:
            if self.managed:
                if not self.servers:
                    # A fleet of its own: with the user's key, else a new random one its servers and clients share.
                    keyed = with_engine_key(self.settings)
                    self._engine_key = keyed.api_key if self.settings.api_key is None else None
                    self._replicas = self._replica_maker(keyed)
                    self.layout = self._replicas.layout
                    self.servers = [self._replicas.new() for _ in range(self.settings.replicas)]
                    for replica in self.servers:
                        replica.on_exit(self._server_exited)
                    self.scaling = self._scaling_loop()
                servers = list(self.servers)
            else:
                if not self.settings.remote_urls:
                    raise ValueError(f"remote engine: give at least one server URL ({REMOTE_URLS_WHERE})")
                _load_sdk()
                self._attach([server_root(url) for url in self.settings.remote_urls])
                return
        # Side by side: every replica is on its way before the studio waits for the first.
        for server in servers:
            if server.state not in (ServerState.STARTING, ServerState.READY):  # else started by the caller
                server.start(wait=False)
        _load_sdk()  # while the servers start: the two share no work
        if wait:
            for server in servers:
                server.wait_ready()
        self._attach([server.base_url for server in servers])
        if self.scaling is not None:
            self.scaling.start()

    def _replica_maker(self, settings: StudioSettings) -> ReplicaMaker:
        if settings.cluster == "ray":
            # Imported here: Ray is an optional extra, and a studio on one machine never loads it.
            from studio.backend.servers.ray_fleet import RayReplicas

            return RayReplicas(settings, self.store.logs_dir)
        return LocalReplicas(settings, self.store.logs_dir)

    def _attach(self, urls: list[str]) -> None:
        pool = EndpointPool.from_urls(urls, client_class=self.kind.client_class, **self._client_options())
        self.dispatcher.set_slots(self._slot_count(len(urls)))
        self.served_model = next(iter(pool.served_models()), None)
        self.pool = pool

    def _api_key(self) -> str | None:
        """The key the studio's clients send: the user's, else the one its managed fleet was started with."""
        given = self.settings.api_key_value()
        if given or not self.managed or self._engine_key is None:
            return given
        return self._engine_key.get_secret_value()

    def _client_options(self) -> dict:
        return {
            "api_key": self._api_key(),
            "http_timeout_s": self.settings.http_timeout_s,
            "poll_interval_s": self.settings.poll_interval_s,
        }

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
        except Exception as exc:  # shown in the page through server_status / start_error
            self.start_error = str(exc)
            log.error("engine start failed: %s", exc)

    def stop(self) -> None:
        scaling = self.scaling
        if scaling is not None:
            with self._scaling_lock:  # no replica joins the fleet after this: it is stopped below, or never started
                scaling.stopped.set()
        for server in self.servers:
            server.stop()
        if scaling is not None:
            scaling.stop()  # an add under way gives up once its server is stopped
        with self._lock:
            self._starter = None  # a later start_in_background starts again

    def restart(self) -> None:
        self.stop()
        self.start_error = None
        self.start()

    def apply_settings(self, settings: StudioSettings) -> None:
        """New engine settings: they take effect on the next start (the server is rebuilt)."""
        self.stop()
        if self._replicas is not None:
            for server in self.servers:
                self._replicas.retire(server)  # on Ray: the actors end, and their GPUs go to the new fleet
        with self._lock:
            self._replicas = None
            self._engine_key = None  # the next fleet gets a key of its own
            self.scaling = None
            self.settings = settings
            self.servers = []
            self.layout = None
            self.pool = None
            self.served_model = None
            self.start_error = None
            self._starter = None
            self.dispatcher.max_in_flight_per_visitor = settings.visitor_max_in_flight

    def apply_sharing(self, **values: object) -> StudioSettings:
        """New sharing settings (slots, per-visitor limits, cancel on close): checked like the flags, and in effect
        at once, for the requests already waiting too; the servers keep running. Raises ValidationError."""
        unknown = set(values) - set(SHARING_FIELDS)
        if unknown:
            raise ValueError(f"not a sharing setting: {', '.join(sorted(unknown))}")
        settings = StudioSettings.model_validate({**self.settings.model_dump(), **values})
        with self._lock:
            self.settings = settings
            self.dispatcher.max_in_flight_per_visitor = settings.visitor_max_in_flight
            self.dispatcher.set_slots(self._slot_count(self.pool.taking_work if self.pool else 1))
        return settings

    def set_auto_restart(self, on: bool) -> None:
        """Takes effect at once, for the runs under way too."""
        self.settings = self.settings.model_copy(update={"auto_restart": bool(on)})
        for run in self.board.runs:
            if not run.finished:
                run.resubmit_unstarted = self.managed and bool(on)

    def engine_summary(self, for_operator: bool = True) -> str:
        """One line for the page: which engine, and whether it can take work. For operators it says where (server
        addresses, the layout) and why (start errors, a crash's message); `for_operator=False` gives the same state
        without addresses, ports, paths or error text: what every visitor's page may show (public_summary)."""
        served = self.served_model if for_operator or not self.served_model else _model_name(self.served_model)
        serving = f", serving {served}" if served else ""
        kind = self.kind.label
        if not self.managed:
            if self.pool is None:
                return f"{kind}: not attached"
            where = ", ".join(self.settings.remote_urls) if for_operator else f"{len(self.pool.endpoints)} attached"
            return f"{kind}: {where}{serving}"
        if self.start_error:
            if not for_operator:
                return f"{kind}: failed to start (an operator can see why)"
            return f"{kind} failed to start: {self.start_error}"
        if len(self.servers) > 1 or (self.settings.scales and self.servers):
            states = [server.state for server in self.servers]
            ready = states.count(ServerState.READY)
            others = ", ".join(
                f"{states.count(state)} {state}"
                for state in ServerState
                if state in states and state is not ServerState.READY
            )
            layout = (
                f"{self.layout}: {ready} of {len(states)} ready"
                if for_operator
                else (f"{ready} of {len(states)} replicas ready")
            )
            return f"{kind}: {layout}" + (f" ({others})" if others else "") + serving
        status = self.server_status()
        if status is None:
            return f"{kind}: not started"
        if status.state is ServerState.STARTING:
            return f"{kind}: starting ({status.starting_for_s or 0:.0f} s)"
        if status.state is ServerState.READY:
            where = f" at {status.url}" if for_operator else ""
            return f"{kind}: ready{where}{serving} (started in {status.startup_s or 0:.1f} s)"
        return f"{kind}: {status.state} {status.message}" if for_operator else f"{kind}: {status.state}"

    def public_summary(self) -> str:
        """The engine's state for every visitor's page: engine_summary without addresses, ports or paths."""
        return self.engine_summary(for_operator=False)

    def server_status(self) -> ServerStatus | None:
        return self.server.status() if self.server else None

    # ---- one replica of the fleet ------------------------------------------------------------------
    def replica(self, index: int) -> ManagedServer:
        if not 0 <= index < len(self.servers):
            raise ValueError(f"no replica {index}: this studio runs {len(self.servers)} (0 to {len(self.servers) - 1})")
        return self.servers[index]

    def _take_out(self, index: int, reason: str) -> ManagedServer:
        """Before a replica goes down on purpose: no new work for it, what it runs fails with the reason, and
        what it only queued is sent to the other replicas (or waits for it, where none is up)."""
        server = self.replica(index)
        if self.pool is not None and server.port:
            self.pool.mark_exited(server.base_url)
            for run in self.board.runs:
                if not run.finished:
                    run.fail_endpoint_threadsafe(server.base_url, f"replica {index} {reason}", started_only=True)
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
            self.pool.replace_url(url, server.base_url, **self._client_options())
        self.pool.mark_restarted(server.base_url, ok=True)

    # ---- a fleet that follows its load -------------------------------------------------------------
    def _scaling_loop(self) -> ScalingLoop | None:
        settings = self.settings
        if not settings.scales:
            return None
        assert settings.replicas_min is not None and settings.replicas_max is not None
        policy = ScalingPolicy(
            min_replicas=settings.replicas_min,
            max_replicas=settings.replicas_max,
            queue_per_replica=settings.scale_out_queue,
            sustain_s=settings.scale_out_after_s,
            idle_s=settings.scale_in_idle_s,
        )
        hooks = ScalingHooks(read=self.fleet_load, add=self._add_replica, remove=self._remove_replica)
        return ScalingLoop(Autoscaler(policy), hooks, interval_s=self.autoscale_interval_s)

    def fleet_load(self) -> FleetLoad:
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
        return FleetLoad(waiting=self._sendable(), replicas=tuple(replicas))

    def _sendable(self) -> int:
        """Requests waiting in the studio that another replica could take now: of each run, those waiting, up to
        what its own concurrency lets it have out beside those it has out already (a run of concurrency 1 keeps
        one replica busy, however long its queue)."""
        total = 0
        for run in list(self.board.runs):
            if run.finished:
                continue
            states = [view.state for view in run.views]
            waiting = states.count(RequestState.WAITING)
            out = sum(1 for state in states if not state.finished) - waiting
            total += min(waiting, max(0, run.spec.concurrency - out))
        return total

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
            self.pool.add(server.base_url, **self._client_options())
        except BaseException:
            self._drop_replica(server)
            raise
        self.dispatcher.set_slots(self._slot_count(self.pool.taking_work))
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
        self.dispatcher.set_slots(self._slot_count(self.pool.taking_work))
        # Normally there is nothing to wait for (it was idle), unless a request reached it as it was chosen.
        while endpoint.outstanding and not cancelled.wait(DRAIN_POLL_S):
            pass
        if endpoint.outstanding:
            raise RuntimeError(f"called off: the fleet stops while {name} still has {endpoint.outstanding} requests")
        self.pool.remove(url)
        self._drop_replica(server)
        return f"{name} at {url} stopped" + (" and its Ray actor ended" if self.settings.cluster == "ray" else "")

    def _drop_replica(self, server: ManagedServer) -> None:
        with self._scaling_lock:
            self.servers = [other for other in self.servers if other is not server]
        if self._replicas is not None:
            self._replicas.retire(server)

    def run_defaults(self, tier: str) -> RunDefaults:
        """What a request at `tier` asks where the user gives nothing (frames, fps, steps, guidance): this engine's
        defaults and the settings', as RunSpec.resolved fills them in; the page's form shows them."""
        return self.kind.defaults_for(tier, self.settings)

    def checked_spec(self, spec: RunSpec) -> RunSpec:
        """`spec` as this engine runs it (RunSpec.resolved: every default filled in), checked before anything is
        built or sent: its size against max_run_requests (RunTooLarge), then its shape and what the wire contract
        limits (RunSpec.check_requests: one request stands for all). new_run builds its requests once."""
        spec = spec.resolved(self.kind, self.settings)
        self.check_run_size(spec)
        spec.check_requests()
        return spec

    @property
    def starting(self) -> bool:
        """The engine is on its way up (or about to be): worth waiting for."""
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

    async def wait_until_ready(self, poll_s: float = 0.5) -> None:
        """Start if needed and wait while the engine starts; returns when ready or when starting failed."""
        self.start_in_background()
        waiting = AsyncRetrying(retry=retry_if_result(lambda starting: starting), wait=wait_fixed(poll_s))
        await waiting(lambda: self.starting)

    def ready(self) -> bool:
        if not self.managed:
            return self.pool is not None
        # A fleet takes work while any replica does: the router sends it there.
        return self.pool is not None and any(server.state is ServerState.READY for server in self.servers)

    def check_run_size(self, spec: RunSpec) -> None:
        """Raises RunTooLarge where the run has more requests than max_run_requests (for everyone, operators too).
        Cheap: callers may ask before building the run's requests."""
        refusal = spec.too_many_requests(self.settings.max_run_requests)
        if refusal is not None:
            raise RunTooLarge(refusal)

    def new_run(self, spec: RunSpec, visitor: Visitor = LOCAL_OPERATOR) -> Run:
        """A run of `visitor`'s, on the board (the caller starts it). Raises RunTooLarge past max_run_requests,
        VisitorLimitExceeded where it would take the visitor past one of their limits, and OutputsFull (a
        RuntimeError: "no space left on the outputs folder (...)") where history has no room for it; a run refused
        leaves nothing in history or on the board."""
        spec = spec.resolved(self.kind, self.settings)  # as checked_spec has it; the defaults once for every caller
        self.check_run_size(spec)
        if self.pool is None or not self.ready():
            state = self.server.status().message if self.server else "not started"
            raise RuntimeError(f"the engine is not ready ({state})")
        if not visitor.operator:
            self._check_limits(visitor, len(spec.prompts) * spec.copies)
        run = Run(
            spec,
            self.pool,
            self.store,
            request_timeout_s=self.settings.request_timeout_s,
            resubmit_unstarted=self.managed and self.settings.auto_restart,
            restart_wait_s=self.settings.init_timeout_s,
            visitor=visitor,
            dispatcher=self.dispatcher,
            server_wait_s=self.settings.server_wait_s,
        )
        self.board.add_run(run)
        return run

    def _check_limits(self, visitor: Visitor, requests: int) -> None:
        queued, limit = len(self.board.unsent(visitor)), self.settings.visitor_max_queued
        if queued + requests > limit:
            raise VisitorLimitExceeded(
                f"at most {limit} queued requests per visitor; you have {queued} queued and asked for {requests} more"
            )
        hourly = self.settings.visitor_max_videos_per_hour
        if hourly is not None:
            made = self.store.requests_since(visitor.id, time.time() - HOUR_S)
            if made + requests > hourly:
                raise VisitorLimitExceeded(
                    f"at most {hourly} videos per hour per visitor; you have asked for {made} in the last hour "
                    f"and {requests} more now"
                )

    def cancel_unsent(self, visitor: Visitor) -> int:
        """The visitor's requests not yet sent to a server are cancelled (their page closed); running ones finish."""
        return self.board.cancel_unsent(visitor)

    def page_opened(self, visitor: Visitor, page: str) -> None:
        self.open_pages.opened(visitor, page)

    def page_closed(self, visitor: Visitor, page: str) -> int:
        """A page of the visitor's closed: where it was their last, what they had not yet sent is cancelled
        (unless the operator turned that off). Returns how many requests were cancelled. From any thread (the page's
        unload handler runs in a worker thread): each run is cancelled on its own event loop, in time in proportion
        to its requests, with one history write made off the loop."""
        last = self.open_pages.closed(visitor, page)
        if not (last and self.settings.cancel_unsent_on_close):
            return 0
        return self.cancel_unsent(visitor)

    def standing(self, visitor: Visitor) -> Standing:
        """Where the visitor's work stands: theirs queued and at a server, others' ahead of it, and an ETA."""
        queued = len(self.board.unsent(visitor))
        in_flight = self.dispatcher.in_flight_by_visitor()
        mine_in_flight = in_flight.pop(visitor.id, 0)
        ahead = in_flight + self.dispatcher.served_before(visitor.id, queued)
        ahead = +ahead  # visitors with nothing ahead drop out
        recent = self.board.recent_inference_s()
        eta_s = None
        if recent:
            servers = self.pool.taking_work if self.pool else 1
            eta_s = (sum(ahead.values()) + queued + mine_in_flight) * (sum(recent) / len(recent)) / servers
        return Standing(queued, mine_in_flight, sum(ahead.values()), len(ahead), eta_s)

    async def resume_unfinished(self) -> int:
        """Follow up, by job id, what an earlier studio left at servers that still answer; the rest is marked lost
        with the reason. Once per studio process: start() begins it, and a call (before or after) waits for that
        one follow-up and returns how many requests it follows."""
        return await asyncio.wrap_future(self._begin_follow_up())

    def _begin_follow_up(self) -> concurrent.futures.Future[int]:
        """The follow-up of the earlier studio's requests, begun at the first call, on the controller's own loop."""
        with self._follow_up_lock:
            if self._follow_up is None:
                if self._leftovers:
                    self._own_loop = _OwnLoop()
                    self._follow_up = self._own_loop.submit(self._follow_up_leftovers())
                else:
                    self._follow_up = concurrent.futures.Future()
                    self._follow_up.set_result(0)
            return self._follow_up

    async def _follow_up_leftovers(self) -> int:
        try:
            await asyncio.to_thread(_load_sdk)  # done already where start() began it
            leftovers = await leftovers_to_follow(
                self.store,
                rows=self._leftovers,
                client_class=self.kind.client_class,
                **self._client_options(),
            )
        except Exception:  # the studio serves on; those requests stay as history has them, for the next start
            log.exception("could not follow up the requests an earlier studio left at servers")
            return 0
        if leftovers is None:
            return 0
        pool, rows = leftovers
        # A follow-up run per visitor: each sees, cancels and counts their own requests as before the restart.
        by_visitor: dict[str, list[dict]] = {}
        for row in rows:
            by_visitor.setdefault(row.get("visitor") or LOCAL_OPERATOR.id, []).append(row)
        for visitor_id, theirs in by_visitor.items():
            name = visitor_id.partition(":")[2] or visitor_id  # "user:alice": alice (history keeps ids only)
            visitor = LOCAL_OPERATOR if visitor_id == LOCAL_OPERATOR.id else Visitor(id=visitor_id, name=name)
            run = Run.resume(
                theirs, pool, self.store, request_timeout_s=self.settings.request_timeout_s, visitor=visitor
            )
            self.board.add_run(run)
            run.start()
        return len(rows)

    def _server_exited(self, server: ManagedServer) -> None:
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
        for run in self.board.runs:
            if not run.finished:
                # With a restart coming, what the server only queued is sent again once it is back; with other
                # replicas up, it is sent to them at once. What it had started fails with the reason.
                run.fail_endpoint_threadsafe(url, reason, started_only=restart or others)
        if restart:
            threading.Thread(target=self._auto_restart, args=(server, reason), name="auto-restart", daemon=True).start()

    def _may_auto_restart(self) -> bool:
        """Auto-restart is on and has not been used up: at most max_auto_restarts within restart_window_s, so a
        server that dies at every start is not restarted forever."""
        if not (self.managed and self.settings.auto_restart):
            return False
        now = time.monotonic()
        while self._auto_restarts and now - self._auto_restarts[0] > self.settings.restart_window_s:
            self._auto_restarts.popleft()
        if len(self._auto_restarts) >= self.settings.max_auto_restarts:
            self.auto_restart_note = (
                f"not restarted: {len(self._auto_restarts)} automatic restarts within "
                f"{self.settings.restart_window_s:.0f} s already"
            )
            log.error("server crashed again; %s", self.auto_restart_note)
            return False
        self._auto_restarts.append(now)
        return True

    def _auto_restart(self, server: ManagedServer, reason: str) -> None:
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
            self.pool.replace_url(url, server.base_url, **self._client_options())
            url = server.base_url
        self.auto_restart_note = f"restarted automatically at {time.strftime('%H:%M:%S')} after: {reason}"
        log.info("server back at %s", url)
        if self.pool is not None:
            self.pool.mark_restarted(url, ok=True)

    def close(self) -> None:
        self.stop()
        if self._own_loop is not None:
            self._own_loop.stop()
        self.store.close()
