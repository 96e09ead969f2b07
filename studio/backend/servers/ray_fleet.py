"""The fleet on a Ray cluster: each replica is a Ray actor that asks Ray for its GPUs, runs the server
subprocess (embedded engine or vLLM-Omni) on the node Ray placed it on, and reports its URL and state; the
studio holds a `RayServer` per replica, a servers.replica.Replica as ManagedServer is, and its router talks to
the servers directly.

A server that dies on its own is reported to the studio (what it ran fails, what it queued goes to the other
replicas) and started again on its port: by the studio's auto-restart where that is on, else by its RayServer.
An actor whose process or node dies is restarted by Ray (max_restarts); its server is then started again the same
way, after the one the dead actor left on the node is ended.

`RayReplicas` makes the replicas, one at a time: the fleet of --replicas at start, and one more whenever the
studio scales out; a replica taken out is stopped and its actor ended, so that Ray has its GPUs (or CPUs) back.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.backend.engine_kinds import engine_kind
from studio.backend.servers import ray_cluster
from studio.backend.servers.launchers import launch_for, world_size
from studio.backend.servers.supervisor import ManagedServer, ServerStartError, ServerState, ServerStatus
from studio.config import StudioSettings

log = logging.getLogger(__name__)

# Ray restarts a replica's actor this many times after its process or node dies (the studio's own auto-restart
# limits then apply to the server inside it).
ACTOR_MAX_RESTARTS = 3
# Calls at once on one actor: a watch that waits for the server to die, plus start, stop, status and log reads.
ACTOR_CONCURRENCY = 8
# How long a stop waits for the actor (the server's own grace is 15 s) before the studio ends the server itself.
STOP_TIMEOUT_S = 30.0
# How long a call that only reads (status, log) waits for an actor: the page must not hang on a dead node.
READ_TIMEOUT_S = 10.0
# How often a wait for Ray to place a new replica looks whether it was called off.
PLACE_POLL_S = 0.25


class _NodeServer(ManagedServer):
    """A ManagedServer bound to `host` (the node's address on a cluster): its URL names that host."""

    def __init__(self, host: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.host = host

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://{self.host}:{self.port}"


class ReplicaHost:
    """The body of a replica's Ray actor: one server subprocess on this node, started, watched and stopped here."""

    def __init__(self, settings: StudioSettings, name: str | None, log_path: str | None, loopback: bool):
        import ray

        self.host = ray_cluster.LOOPBACK if loopback else ray.util.get_node_ip_address()
        # Which node Ray placed it on, for the page: the node's address and the start of its id.
        self.node = f"{ray.util.get_node_ip_address()} ({ray.get_runtime_context().get_node_id()[:8]})"
        # Ray gives the actor its GPUs through CUDA_VISIBLE_DEVICES, which the server inherits.
        self.gpus = [str(gpu) for gpu in ray.get_gpu_ids()] or None
        self.server = _NodeServer(
            self.host,
            launch=lambda port: launch_for(settings, port, host=self.host),
            log_path=Path(log_path) if log_path else None,
            init_timeout_s=settings.init_timeout_s,
            name=name,
            gpus=self.gpus,
        )
        self._changed = threading.Condition()
        self._generation = 0  # one more at every start: a watch of an earlier process ends
        self._crashed: set[int] = set()
        self.server.on_exit(self._exited)

    def _exited(self, _server: ManagedServer) -> None:
        with self._changed:
            self._crashed.add(self._generation)
            self._changed.notify_all()

    def start(self, same_port: bool = False, previous: dict | None = None) -> dict:
        """`previous`: the port, pid and start time the studio last saw for this replica. An actor that Ray
        restarted has never run a server itself: the one its dead predecessor left is ended, and its port is
        taken again where `same_port` asks for it, so the studio's URL for the replica stays good."""
        if previous and self._generation == 0:
            _end_orphan(previous.get("pid"), previous.get("started_at"))
            if same_port and previous.get("port"):
                self.server.port = previous["port"]
        with self._changed:
            self._generation += 1
            self._changed.notify_all()
        self.server.start(wait=False, same_port=same_port)
        return self.report()

    def wait_ready(self, timeout_s: float | None = None) -> dict:
        self.server.wait_ready(timeout_s)
        return self.report()

    def stop(self) -> dict:
        self.server.stop()
        with self._changed:
            self._changed.notify_all()
        return self.report()

    def watch(self, generation: int) -> dict:
        """Returns once the server of start `generation` is gone: crashed, stopped or started again."""
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    generation in self._crashed
                    or generation != self._generation
                    or self.server.state in (ServerState.STOPPED, ServerState.FAILED)
                )
            )
        return self.report()

    def log_tail(self, lines: int) -> list[str]:
        return self.server.log_tail(lines)

    def crash_lines(self, limit: int) -> list[str]:
        return self.server.crash_lines(limit)

    def report(self) -> dict:
        """What the studio shows and routes by; a dict, so the studio need not unpickle this node's objects."""
        status = self.server.status()
        return {
            "generation": self._generation,
            "crashed": self._generation in self._crashed,
            "state": str(status.state),
            "name": status.name,
            "url": status.url,
            "pid": status.pid,
            "port": status.port,
            "started_at": status.started_at,
            "ready_at": status.ready_at,
            "exit_code": status.exit_code,
            "message": status.message,
            "command": status.command,
            "gpus": self.gpus,
            "node": self.node,
            "node_pid": os.getpid(),
        }


def _end_orphan(pid: int | None, started_at: float | None) -> None:
    """Kill the process group of a server whose actor died, where that process still runs: it was started in
    its own session, so the actor's death left it running. A pid taken since by another process (one that
    started later than the server did) is left alone."""
    import psutil

    if pid is None or started_at is None:
        return
    try:
        process = psutil.Process(pid)
        if process.create_time() > started_at + 5.0:
            return
        os.killpg(pid, signal.SIGKILL)
        process.wait(10)
    except (psutil.Error, ProcessLookupError, PermissionError):
        return


def replica_resources(settings: StudioSettings) -> dict[str, float]:
    """What a replica asks Ray for: its width in GPUs where its server runs on GPUs, else its engine's threads
    in CPUs (so that Ray places no more replicas on a node than its cores serve)."""
    shape = engine_kind(settings).replica
    if (shape is not None and shape.gpus_only) or settings.device == "cuda":
        return {"num_gpus": world_size(settings), "num_cpus": 1}
    return {"num_gpus": 0, "num_cpus": (settings.engine_threads or 1) * world_size(settings)}  # threads per rank


class RayServer:
    """In the studio: one replica on the cluster, a servers.replica.Replica as ManagedServer is (start, wait_ready,
    stop, restart, state, base_url, on_exit, ...). Its state is the last the actor reported, so reading it costs no
    call."""

    def __init__(
        self,
        actor: Any,
        name: str | None,
        log_path: Path | None,
        init_timeout_s: float,
        restart_on_crash: bool = True,
        max_restarts: int = 3,
        restart_window_s: float = 600.0,
        local: bool = True,
        resources: dict[str, float] | None = None,
    ):
        """`restart_on_crash`: start the server again after it (or its actor) died, at most `max_restarts` times
        within `restart_window_s`; off where the studio restarts it itself (its auto-restart). `local`: the server
        runs on this machine (a local Ray). `resources`: what its actor asks Ray for, to say so where Ray has no
        room for it."""
        self._actor = actor
        self._resources = resources or {}
        self.local = local
        self.restart_on_crash = restart_on_crash
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self._restarts: deque[float] = deque()
        self.name = name or "server"
        self.log_path = log_path
        self.init_timeout_s = init_timeout_s
        self.gpus: list[str] | None = None
        self.state = ServerState.STOPPED
        self.exit_code: int | None = None
        self.message = ""
        self._report: dict = {}
        # The last server process seen (pid, start time): a stop's report, or a new actor's, no longer names it.
        self._last_process: dict = {}
        self._host: str | None = None
        self.port: int | None = None
        self._lock = threading.RLock()
        self._exit_callbacks: list[Callable[[RayServer], None]] = []
        self._life = threading.RLock()  # one start, stop or restart at a time
        self._watcher: threading.Thread | None = None

    # ---- what callers read -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None or self._host is None:
            raise RuntimeError("server not started")
        return f"http://{self._host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id on its node."""
        return self._report.get("pid")

    def status(self) -> ServerStatus:
        """From the actor's last report (at start, ready, stop and death): the page asks often, and must not wait
        on a node."""
        report = self._report
        return ServerStatus(
            state=self.state,
            name=report.get("name", ""),
            url=self.base_url if self.port else None,
            pid=report.get("pid"),
            port=self.port,
            started_at=report.get("started_at"),
            ready_at=report.get("ready_at"),
            exit_code=self.exit_code,
            message=self.message,
            command=report.get("command", ""),
        )

    @property
    def node(self) -> str | None:
        """The node Ray placed the replica on: its address and the start of its id."""
        return self._report.get("node")

    def status_report(self) -> dict:
        """What the replica's actor says now: its state, URL, pid, GPUs and its own process id on the node."""
        report = self._call("report", timeout_s=READ_TIMEOUT_S)
        self._take(report)
        return report

    def log_tail(self, lines: int = 50) -> list[str]:
        try:
            return self._call("log_tail", lines, timeout_s=READ_TIMEOUT_S)
        except Exception:  # the actor is gone or restarting: its log file stays on its node
            return [f"[studio] the replica's Ray actor does not answer ({self.message})"]

    def crash_lines(self, limit: int = 5) -> list[str]:
        """The lines that explain the server's crash (ManagedServer.crash_lines), read on its node."""
        try:
            return self._call("crash_lines", limit, timeout_s=READ_TIMEOUT_S)
        except Exception:  # the actor is gone or restarting: it says nothing of why
            return []

    def on_exit(self, callback: Callable[[RayServer], None]) -> None:
        """Called (from a watch thread) when the server or its actor dies without being asked to stop."""
        self._exit_callbacks.append(callback)

    # ---- life cycle --------------------------------------------------------------------------------
    def start(self, wait: bool = True, same_port: bool = False) -> None:
        with self._life:
            self._start(wait, same_port)

    def _start(self, wait: bool, same_port: bool) -> None:
        with self._lock:
            if self.state in (ServerState.STARTING, ServerState.READY):
                raise RuntimeError(f"server already {self.state}")
            self.state, self.message, self.exit_code = ServerState.STARTING, "starting on Ray", None
        try:
            report = self._call("start", same_port, self._previous())
        except Exception as exc:
            with self._lock:
                self.state, self.message = ServerState.FAILED, str(exc)
            raise ServerStartError(f"{self.name}: cannot start on Ray: {_cause(exc)}") from exc
        self._take(report)
        self._watch(report["generation"])
        if wait:
            self.wait_ready()

    def _previous(self) -> dict | None:
        if self.port is None:
            return None
        return {"port": self.port, **self._last_process}

    def wait_ready(self, timeout_s: float | None = None) -> None:
        try:
            report = self._call("wait_ready", timeout_s)
        except Exception as exc:
            with self._lock:
                self.state, self.message = ServerState.FAILED, _cause(exc)
            raise ServerStartError(_cause(exc)) from exc
        self._take(report)

    def stop(self, grace_s: float = 15.0) -> int | None:
        with self._life:
            return self._stop()

    def _stop(self) -> int | None:
        with self._lock:
            if self.state is ServerState.STOPPED:
                return self.exit_code
            self.state = ServerState.STOPPING
        try:
            self._take(self._call("stop", timeout_s=STOP_TIMEOUT_S))
        except Exception as exc:
            log.warning("%s: stop on Ray: %s", self.name, _cause(exc))
            if self.local:
                # Ray itself is going (Ctrl-C reaches its processes too) or the actor hangs: on this machine the
                # studio ends the server it knows by pid, so that none outlives it.
                _end_orphan(self._last_process.get("pid"), self._last_process.get("started_at"))
        with self._lock:
            self.state, self.message = ServerState.STOPPED, "stopped"
        return self.exit_code

    def restart(self, wait: bool = True, same_port: bool = False) -> None:
        with self._life:
            self.stop()
            self.start(wait=wait, same_port=same_port)

    def wait_placed(self, timeout_s: float, cancelled: threading.Event | None = None) -> bool:
        """Wait until Ray has placed the replica's actor (found a node with its GPUs or CPUs free, which on a
        cluster that adds nodes may take minutes). False where `cancelled` was set first; raises ServerStartError
        where Ray found no room within `timeout_s`."""
        ray = ray_cluster.import_ray()
        placed = self._actor.report.remote()
        deadline = time.monotonic() + timeout_s
        while not ray.wait([placed], timeout=PLACE_POLL_S)[0]:
            if cancelled is not None and cancelled.is_set():
                return False
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name}: Ray found no node with room for it within {timeout_s:.0f} s "
                    f"(it asks for {self._resources})"
                )
        try:
            self._take(ray.get(placed))
        except Exception as exc:  # placed, but its actor could not start there
            raise ServerStartError(f"{self.name}: its Ray actor did not start: {_cause(exc)}") from exc
        return True

    def end_actor(self) -> None:
        """End the replica's actor for good (no restart by Ray), so that its GPUs or CPUs go back to Ray. Its
        server is stopped first by the caller; where the actor is gone already, there is nothing to do."""
        ray = ray_cluster.import_ray()
        try:
            ray.kill(self._actor, no_restart=True)
        except Exception as exc:  # Ray itself is going
            log.warning("%s: ending its Ray actor: %s", self.name, _cause(exc))

    # ---- internals ---------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        ray = ray_cluster.import_ray()
        return ray.get(getattr(self._actor, method).remote(*args), timeout=timeout_s)

    def _take(self, report: dict) -> None:
        with self._lock:
            self._report = report
            if report.get("pid") is not None:
                self._last_process = {"pid": report["pid"], "started_at": report.get("started_at")}
            if report.get("url"):
                self._host = report["url"].split("://", 1)[1].rsplit(":", 1)[0]
                self.port = report["port"]
            self.gpus = report.get("gpus")
            self.exit_code = report.get("exit_code")
            self.message = report.get("message", "")
            if self.state is not ServerState.STOPPING:
                self.state = ServerState(report["state"])

    def _watch(self, generation: int) -> None:
        self._watcher = threading.Thread(
            target=self._wait_for_exit, args=(generation,), name=f"{self.name}-ray-watch", daemon=True
        )
        self._watcher.start()

    def _wait_for_exit(self, generation: int) -> None:
        try:
            report = self._call("watch", generation)
            died = report["crashed"] and report["generation"] == generation
        except Exception as exc:  # the actor's process or node died: Ray restarts the actor
            report, died = None, True
            with self._lock:
                if self.state in (ServerState.STOPPING, ServerState.STOPPED):
                    return
                self.message = f"its Ray actor died: {_cause(exc)}"
        if not died:
            return
        with self._lock:
            if self.state in (ServerState.STOPPING, ServerState.STOPPED):
                return
            if report is not None:
                self._take(report)
            self.state = ServerState.CRASHED
        for callback in self._exit_callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("exit callback failed")
        if self.restart_on_crash:
            self._restart_after_crash()

    def _restart_after_crash(self) -> None:
        """On the same port where it is free, so the router's health watch finds it again at its URL."""
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > self.restart_window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            log.error(
                "%s crashed again; not restarted: %d restarts within %.0f s",
                self.name,
                len(self._restarts),
                self.restart_window_s,
            )
            return
        self._restarts.append(now)
        with self._life:
            if self.state is not ServerState.CRASHED:  # someone else restarted or stopped it meanwhile
                return
            try:
                self.restart(wait=True, same_port=True)
            except Exception as exc:
                log.error("%s: restart after a crash failed: %s", self.name, _cause(exc))


def _cause(exc: BaseException) -> str:
    """The message of what failed on the node, without Ray's traceback wrapping."""
    cause = getattr(exc, "cause", None)
    lines = str(cause if cause is not None else exc).strip().splitlines()
    return lines[-1] if lines else repr(exc)


class RayReplicas:
    """Makes the replicas of a fleet on the Ray of settings.ray_address (a local one on loopback by default), one
    at a time, each asking Ray for its width in GPUs; and ends those taken out. The servers are not started here."""

    def __init__(self, settings: StudioSettings, logs_dir: Path):
        self.connection = ray_cluster.connect(settings.ray_address)
        ray = ray_cluster.import_ray()
        self.settings = settings
        self.logs_dir = logs_dir
        # Ray gives each actor its GPUs; the studio names none and picks no port (the node picks a free one).
        self._replica_settings = settings.model_copy(
            update={"replicas": 1, "gpus": None, "server_port": None, "replicas_min": None, "replicas_max": None}
        )
        self.resources = replica_resources(self._replica_settings)
        self._actor_class = ray.remote(
            max_restarts=ACTOR_MAX_RESTARTS, max_concurrency=ACTOR_CONCURRENCY, **self.resources
        )(ReplicaHost)
        # A fleet that is, or may become, more than one replica names each; a lone replica keeps the plain name.
        self._named = max(settings.replicas, settings.replicas_max or 1) > 1
        self._indices: dict[RayServer, int] = {}
        self._lock = threading.Lock()

    @property
    def layout(self) -> str:
        return ray_layout_label(self.settings)

    def new(self) -> RayServer:
        """One more replica: its actor is asked of Ray now (placed when Ray finds room: see wait_placed); it takes
        the lowest number free, so a replica added after one was taken out has that one's name and log."""
        with self._lock:
            index = min(set(range(len(self._indices) + 1)) - set(self._indices.values()))
            name = f"replica {index}" if self._named else None
            log_path = self.logs_dir / f"{self.settings.engine}-server{f'-{index}' if self._named else ''}.log"
            actor = self._actor_class.remote(self._replica_settings, name, str(log_path), self.connection.local)
            # Where the studio's auto-restart is off, the replica restarts its own server: the fleet keeps its width.
            server = RayServer(
                actor,
                name,
                log_path,
                self.settings.init_timeout_s,
                restart_on_crash=not self.settings.auto_restart,
                max_restarts=self.settings.max_auto_restarts,
                restart_window_s=self.settings.restart_window_s,
                local=self.connection.local,
                resources=self.resources,
            )
            self._indices[server] = index
        return server

    def wait_placed(
        self, server: RayServer, cancelled: threading.Event | None = None, timeout_s: float | None = None
    ) -> bool:
        """Wait (at most `timeout_s`, by default the init timeout) for Ray to place a new replica; False where
        `cancelled` came first, ServerStartError where Ray found no room in time."""
        return server.wait_placed(self.settings.init_timeout_s if timeout_s is None else timeout_s, cancelled)

    def retire(self, server: RayServer) -> None:
        """Stop the replica's server and end its actor: Ray has its resources back, and its number is free."""
        server.stop()
        server.end_actor()
        with self._lock:
            self._indices.pop(server, None)


def ray_layout_label(settings: StudioSettings) -> str:
    """The layout in a few words: "2 x TP4 on Ray at h:6379", "2 x embedded on Ray (local)"; a fleet that scales
    gives its bounds: "1-4 x TP4 on Ray at h:6379"."""
    kind = engine_kind(settings)
    shape = (kind.replica.label(settings) if kind.replica is not None else "") or settings.engine
    where = f"Ray at {settings.ray_address}" if settings.ray_address else "Ray (local)"
    count = (
        f"{settings.replicas_min}-{settings.replicas_max}"
        if settings.replicas_min is not None and settings.replicas_max is not None
        else str(settings.replicas)
    )
    return f"{count} x {shape} on {where}"
