"""The Ray the studio's fleet runs on: a running cluster it joins (--ray-address), or a local one it starts on
loopback and shuts down again. Dashboard and usage stats stay off either way.

Ray is an optional dependency (`pip install omni-studio[ray]`); it is imported only here and in ray_fleet.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
INSTALL_HINT = "--cluster ray needs Ray: install the studio with its extra, `pip install .[ray]`"
# How long a --ray-address may take to accept a connection: Ray itself retries an address that does not answer
# for minutes.
PROBE_TIMEOUT_S = 5.0


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached; the message says what to do."""


@dataclass(frozen=True)
class RayConnection:
    address: str | None  # the cluster joined; None: a local Ray on loopback
    started_here: bool  # the studio started this Ray, so it shuts it down

    @property
    def local(self) -> bool:
        """Replicas run on this machine: their servers bind loopback. On a cluster they bind the node's address."""
        return self.address is None


_lock = threading.Lock()
_connection: RayConnection | None = None
_stopped = threading.Event()  # set at shutdown: the thread that started a local Ray may end


def import_ray():
    # Read by Ray when it is imported and by the processes it starts: no usage report leaves the machine.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray runs its workers at niceness 15, and the replicas' servers they start inherit it: any other work on the
    # node would then starve the servers. They run at the node's normal priority, as they would outside Ray.
    os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(INSTALL_HINT) from exc
    return ray


def connect(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None) -> RayConnection:
    """Join the Ray at `address` (host:6379), or start a local one on loopback with `num_cpus` CPUs and `num_gpus`
    GPUs (default: what Ray finds). Where this process is already connected (a caller that started Ray itself),
    that Ray is used as it is."""
    global _connection
    ray = import_ray()
    with _lock:
        if ray.is_initialized():
            if _connection is None:
                _connection = RayConnection(address=address, started_here=False)
            return _connection
        if address:
            check_answers(address)
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayUnavailable(f"cannot join the Ray cluster at {address}: {exc}") from exc
            _connection = RayConnection(address=address, started_here=False)
        else:
            _loopback_only(ray)
            _start_local(ray, num_cpus, num_gpus)
            _connection = RayConnection(address=None, started_here=True)
            log.info("started a local Ray on %s", LOOPBACK)
        return _connection


def check_answers(address: str) -> None:
    """RayUnavailable at once where nothing listens at `address` (host:port): Ray itself retries for minutes."""
    where = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = where.hostname, where.port
    except ValueError:  # a port that is not a number: Ray says what is wrong with it
        return
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise RayUnavailable(
            f"cannot join the Ray cluster at {address}: nothing answers there ({exc.strerror or exc}); start its "
            "head with `ray start --head --port PORT`, or leave --ray-address out for a local Ray"
        ) from None


def _start_local(ray, num_cpus: int | None, num_gpus: int | None = None) -> None:
    """Start a local Ray from a thread that lives until shutdown. Ray ties its node's processes (GCS, raylet) to
    the thread that starts them, which Linux signals when that thread ends: started from the studio's own
    short-lived starter thread, they would die with it."""
    started = threading.Event()
    failed: list[BaseException] = []

    def keep() -> None:
        try:
            # "local": a new Ray of our own, never one another program left running on this machine.
            ray.init(
                address="local",
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                include_dashboard=False,
                _node_ip_address=LOOPBACK,
                log_to_driver=False,
                configure_logging=False,
            )
        except BaseException as exc:
            failed.append(exc)
            return
        finally:
            started.set()
        _stopped.wait()

    _stopped.clear()
    threading.Thread(target=keep, name="ray-node", daemon=True).start()
    started.wait()
    if failed:
        raise RayUnavailable(f"cannot start a local Ray: {failed[0]}") from failed[0]


def _loopback_only(ray) -> None:
    """A local Ray takes loopback for its node address, and binds its servers (GCS, raylet, workers) there:
    otherwise it picks the machine's network address and listens on every interface. Ray does so where it
    treats the machine as one that cannot join a cluster; the setting reaches the processes it starts through
    their environment, and this process through the constant Ray read from it."""
    os.environ[LOCAL_ONLY_ENV] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def current() -> RayConnection | None:
    return _connection


def shutdown() -> None:
    """Disconnect; a Ray the studio started goes down with its workers (and the actors' servers before them)."""
    global _connection
    with _lock:
        connection, _connection = _connection, None
    if connection is None:
        return
    import ray

    if ray.is_initialized():
        ray.shutdown()
    _stopped.set()
    if connection.started_here:
        # A cluster joined later from this process takes its network address again.
        os.environ.pop(LOCAL_ONLY_ENV, None)
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = True


atexit.register(shutdown)
