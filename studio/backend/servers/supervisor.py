"""ManagedServer: one subprocess manager for every server the studio starts (embedded or vLLM-Omni).

Starts the server in a new session on a free loopback port, drains its output into an in-memory tail and
a log file, is ready when GET /health answers 200, fails fast with the log tail if the process dies
before that, notices a crash afterwards, and stops it with SIGTERM to the group, a wait, then SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from studio.backend.servers.launchers import LaunchSpec

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger(__name__)
# How long after launch readiness is polled every 50 ms: a small engine is ready in seconds (and a refused
# connection costs nothing), a big server takes minutes and is then polled four times a second.
QUICK_START_S = 20.0


def _readiness_poll_interval(poll: RetryCallState) -> float:
    return 0.05 if (poll.seconds_since_start or 0.0) < QUICK_START_S else 0.25


_LIVE_SERVERS: weakref.WeakSet[ManagedServer] = weakref.WeakSet()


class ServerState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    CRASHED = "crashed"
    FAILED = "failed"  # never became ready
    STOPPING = "stopping"


class ServerStartError(RuntimeError):
    """The server did not become ready; the message carries its own last log lines."""


@dataclass(frozen=True)
class ServerStatus:
    state: ServerState
    name: str
    url: str | None
    pid: int | None
    port: int | None
    started_at: float | None
    ready_at: float | None
    exit_code: int | None
    message: str
    command: str

    @property
    def starting_for_s(self) -> float | None:
        if self.state is ServerState.STARTING and self.started_at:
            return time.time() - self.started_at
        return None

    @property
    def startup_s(self) -> float | None:
        return self.ready_at - self.started_at if self.ready_at and self.started_at else None


# Ports this process handed out lately: the kernel may offer a released port again at once, and two replicas
# started side by side must not be given the same one.
_HANDED_PORTS: deque[int] = deque(maxlen=64)
# A port is free when picked but only bound when the server is up; in between, another server's own sockets
# (vLLM's engine processes pick theirs at random) can take it. The server then exits with this in its log
# (Python's OSError and uvicorn's message, compared in lower case).
_PORT_TAKEN = "address already in use"
_PORT_CLASH_RETRIES = 2
# What a server writes that never explains why it ended: info and debug records (uvicorn's "INFO:", Python
# logging's "2026-... INFO name:", vLLM's "(EngineCore pid=1) INFO 12-01 ..."), progress bars, and Python
# warnings (the warning's line, then the source line it quotes, indented).
_ROUTINE_RECORD = re.compile(r"^(?:\([^)]*\)\s*)?[^A-Za-z]*(?:INFO|DEBUG)\b")
_PROGRESS_BAR = re.compile(r"\d+%\|")
_PYTHON_WARNING = re.compile(r"^\S.*:\d+: [A-Z]\w*Warning: ")
_TRACEBACK = "Traceback (most recent call last):"
_STUDIO_LINE = "[studio] "  # the studio's own lines in the log


def explaining_lines(lines: list[str], limit: int) -> list[str]:
    """Of what a server wrote (oldest first), the last `limit` lines that can explain why it ended: its last
    traceback, else what is left once routine lines (and the studio's own) are dropped."""
    kept: list[str] = []
    quoting_warning = False
    for line in lines:
        if quoting_warning and line[:1].isspace():  # the source line a warning quotes
            quoting_warning = False
            continue
        quoting_warning = bool(_PYTHON_WARNING.match(line))
        routine = _ROUTINE_RECORD.match(line) or _PROGRESS_BAR.search(line) or line.startswith(_STUDIO_LINE)
        if not (quoting_warning or routine or not line.strip()):
            kept.append(line)
    starts = [index for index, line in enumerate(kept) if _TRACEBACK in line]
    if starts:
        kept = kept[starts[-1] :]
    return kept[-limit:] if limit > 0 else []


def free_port(host: str = "127.0.0.1") -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_PORTS:
            _HANDED_PORTS.append(port)
            return port


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return members


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers bind (SO_REUSEADDR): connections of a dead server lingering in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@dataclass
class _Process:
    popen: subprocess.Popen
    reader: threading.Thread
    exited: threading.Event = field(default_factory=threading.Event)


class ManagedServer:
    """A server process the studio owns, on this machine (a servers.replica.Replica). `launch(port)` builds its argv
    and env."""

    def __init__(
        self,
        launch: Callable[[int], LaunchSpec],
        port: int | None = None,
        log_path: Path | None = None,
        init_timeout_s: float = 1800.0,
        health_path: str = "/health",
        tail_lines: int = 400,
        name: str | None = None,
        gpus: list[str] | None = None,
    ):
        """`name`: how the page calls it ("replica 1" of a fleet); `gpus`: the GPUs it was given, to show."""
        self._launch = launch
        self.name = name or "server"
        self.gpus = gpus
        self.requested_port = port
        self.log_path = log_path
        self.init_timeout_s = init_timeout_s
        self.health_path = health_path
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._lines_written = 0  # lines appended to the tail since the start
        self._lines_at_ready: int | None = None  # how many there were when the server became ready
        self._lock = threading.RLock()
        self._proc: _Process | None = None
        self._spec: LaunchSpec | None = None
        self._secrets: list[str] = []
        self.port: int | None = None
        self.state = ServerState.STOPPED
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.exit_code: int | None = None
        self.message = ""
        self._exit_callbacks: list[Callable[[ManagedServer], None]] = []
        _LIVE_SERVERS.add(self)

    # ---- what callers read -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.popen.pid if self._proc else None

    @property
    def node(self) -> str | None:
        """None: it runs on this machine (a replica on Ray names the node it runs on)."""
        return None

    def status(self) -> ServerStatus:
        with self._lock:
            return ServerStatus(
                state=self.state,
                name=self._spec.name if self._spec else "",
                url=self.base_url if self.port else None,
                pid=self.pid,
                port=self.port,
                started_at=self.started_at,
                ready_at=self.ready_at,
                exit_code=self.exit_code,
                message=self.message,
                command=self._spec.display() if self._spec else "",
            )

    def log_tail(self, lines: int = 50) -> list[str]:
        with self._lock:
            return list(self._tail)[-lines:]

    def crash_lines(self, limit: int = 5) -> list[str]:
        """The lines of its log that explain why it ended, for a crash reason: of those written after it became
        ready, its last traceback, else its lines that are not routine (`explaining_lines`); never its start-up
        banner (command, model path, port, warnings). Empty where it wrote none (killed by a signal)."""
        with self._lock:
            if self._lines_at_ready is None:
                return []
            since_ready = min(self._lines_written - self._lines_at_ready, len(self._tail))
            lines = list(self._tail)[len(self._tail) - since_ready :]
        return explaining_lines(lines, limit)

    def on_exit(self, callback: Callable[[ManagedServer], None]) -> None:
        """Called (from a reader thread) when the process ends without being asked to stop."""
        self._exit_callbacks.append(callback)

    # ---- life cycle --------------------------------------------------------------------------------
    def start(self, wait: bool = True, same_port: bool = False) -> None:
        """Start the process (and wait until it is ready). `same_port`: come back on the port of the last run
        when it is free, so that clients holding its URL find it again (a restart after a crash)."""
        with self._lock:
            if self.state in (ServerState.STARTING, ServerState.READY):
                raise RuntimeError(f"server already {self.state}")
            previous = self.port if same_port else None
            port = self.requested_port or (previous if previous and port_is_free(previous) else free_port())
            if self.requested_port and not port_is_free(port):
                self.state, self.message = ServerState.FAILED, f"port {port} is already in use"
                raise ServerStartError(f"cannot start: port {port} on 127.0.0.1 is already in use")
            spec = self._launch(port)  # raises LaunchError with a clear message
            self._spec, self.port = spec, port
            self._secrets = [spec.env[name] for name in spec.secret_env if spec.env.get(name)]
            self._tail.clear()
            self._lines_written, self._lines_at_ready = 0, None
            self.exit_code, self.ready_at, self.message = None, None, ""
            self.started_at = time.time()
            self.state = ServerState.STARTING
            self._append(f"$ {spec.display()}")
            try:
                popen = subprocess.Popen(
                    spec.argv,
                    env={**os.environ, **spec.env},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: stop reaches every child
                )
            except OSError as exc:
                self.state, self.message = ServerState.FAILED, str(exc)
                raise ServerStartError(f"cannot run {spec.argv[0]!r}: {exc}") from exc
            proc = _Process(popen=popen, reader=threading.Thread(target=lambda: None))
            proc.reader = threading.Thread(target=self._drain, args=(proc,), name=f"{spec.name}-log", daemon=True)
            self._proc = proc
            proc.reader.start()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until /health answers 200; raise ServerStartError with the log tail if it dies or times out.
        A server that lost the port it was given before binding it starts again on another one (its URL
        changes: callers read `base_url` after this returns)."""
        for attempt in range(_PORT_CLASH_RETRIES + 1):
            try:
                self._wait_ready_once(timeout_s)
                return
            except ServerStartError:
                if self.requested_port or attempt == _PORT_CLASH_RETRIES or not self._lost_its_port():
                    raise
            lost = self.port
            self.stop(grace_s=5)  # what the failed start left in its process group
            self.start(wait=False)
            self._append(f"[studio] port {lost} was taken before the server could bind it: started on {self.port}")

    def _lost_its_port(self) -> bool:
        return any(_PORT_TAKEN in line.lower() for line in self.log_tail(60))

    def _wait_ready_once(self, timeout_s: float | None) -> None:
        proc = self._proc
        if proc is None:
            raise RuntimeError("server not started")
        # Imported here: a caller that only starts the process (the CLI, before its own imports) needs neither
        # HTTP nor the polling, and the server starts sooner for it.
        import httpx
        from tenacity import Retrying, retry_if_result, stop_after_delay

        from studio.backend.clients.http import sync_client

        url = self.base_url + self.health_path

        def answered(http: httpx.Client) -> bool:
            if proc.exited.is_set() or proc.popen.poll() is not None:
                raise self._exited_before_ready(proc)
            try:
                return http.get(url).status_code == 200
            except httpx.HTTPError:
                return False

        polling = Retrying(
            retry=retry_if_result(lambda ready: not ready),
            wait=_readiness_poll_interval,
            stop=stop_after_delay(timeout_s if timeout_s is not None else self.init_timeout_s),
            sleep=proc.exited.wait,  # wakes at once if the process exits
            retry_error_callback=lambda _: False,
        )
        with sync_client(5.0) as http:
            if polling(answered, http):
                with self._lock:
                    if self.state is ServerState.STARTING:
                        self.state, self.ready_at = ServerState.READY, time.time()
                        # Start-up lines the reader has yet to take from the pipe still count as after this;
                        # crash_lines leaves them out as routine.
                        self._lines_at_ready = self._lines_written
                        self.message = f"ready in {self.ready_at - (self.started_at or 0):.1f} s"
                return
        self.stop()
        with self._lock:
            self.state = ServerState.FAILED
            self.message = "not ready within the init timeout"
        raise ServerStartError(self._failure_text("server was not ready within the init timeout"))

    def _exited_before_ready(self, proc: _Process) -> ServerStartError:
        proc.exited.wait(5)  # the reader thread has the last lines of its log
        code = proc.popen.wait()
        with self._lock:
            self.state, self.exit_code = ServerState.FAILED, code
            self.message = f"exited with code {code} before it was ready"
        return ServerStartError(self._failure_text(f"server exited with code {code} before it was ready"))

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM to the process group, wait, then SIGKILL. Returns the exit code."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return self.exit_code
            self.state = ServerState.STOPPING
        pgid = proc.popen.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            proc.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            proc.popen.wait(10)
        # Children that outlived the leader are in the same group: make sure none is left. (Most servers leave
        # none: then the kill finds no process, and the scan of every process on the machine is skipped.)
        try:
            os.killpg(pgid, signal.SIGKILL)
            left = True
        except ProcessLookupError:
            left = False
        except PermissionError:
            left = True
        if left:
            psutil.wait_procs(group_members(pgid), timeout=10)
        proc.reader.join(5)
        with self._lock:
            self.exit_code = proc.popen.returncode
            self.state, self.message = ServerState.STOPPED, "stopped"
            self._proc = None
        return self.exit_code

    def restart(self, wait: bool = True, same_port: bool = False) -> None:
        self.stop()
        self.start(wait=wait, same_port=same_port)

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals ---------------------------------------------------------------------------------
    def _redact(self, line: str) -> str:
        for secret in self._secrets:
            line = line.replace(secret, "***")
        return line

    def _append(self, line: str) -> None:
        line = self._redact(line)
        with self._lock:
            self._tail.append(line)
            self._lines_written += 1
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    def _drain(self, proc: _Process) -> None:
        assert proc.popen.stdout is not None
        for raw in iter(proc.popen.stdout.readline, b""):
            self._append(raw.decode("utf-8", "replace").rstrip("\n"))
        proc.popen.stdout.close()
        code = proc.popen.wait()
        proc.exited.set()
        with self._lock:
            if self._proc is not proc or self.state is ServerState.STOPPING:
                return
            crashed = self.state is ServerState.READY
            self.exit_code = code
            if crashed:
                self.state = ServerState.CRASHED
                self.message = f"crashed with exit code {code}"
        if crashed:
            self._append(f"[studio] server exited with code {code}")
            for callback in self._exit_callbacks:
                try:
                    callback(self)
                except Exception:
                    log.exception("exit callback failed")

    def _failure_text(self, headline: str) -> str:
        tail = "\n".join(self.log_tail(30))
        return f"{headline}. Last lines of its log:\n{tail}" if tail else headline


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE_SERVERS):
        with contextlib.suppress(Exception):
            server.stop(grace_s=5)
