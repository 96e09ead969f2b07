"""Where results live: mp4 + JSON sidecar per request under the outputs dir, and a SQLite history.

A video counts as done only once its mp4 (validated) and its sidecar are on disk and its history row says
so; only then is it shown.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from studio.backend.runs.states import RequestState
from studio.backend.visitors import LOCAL_OPERATOR
from studio.startup import private_folder

_UNFINISHED = ", ".join(f"'{state.value}'" for state in RequestState if not state.finished)
# How a run stands, as History filters it: each a condition on its requests' counts (SQL, over recent_runs' join).
RUN_STATES: dict[str, str] = {
    "done": "COUNT(q.id) > 0 AND SUM(q.state = 'done') = COUNT(q.id)",
    "failed": "SUM(q.state IN ('failed', 'lost')) > 0",
    "cancelled": "SUM(q.state = 'cancelled') > 0",
    "unfinished": f"SUM(q.state IN ({_UNFINISHED})) > 0",
}
RunState = Literal["done", "failed", "cancelled", "unfinished"]


@dataclass(frozen=True)
class RunFilter:
    """Which runs History shows: bench runs or not, one tier or all, a state or all, and a prompt search (its words
    anywhere in one of a run's prompts, case aside for ASCII letters)."""

    bench: bool = False
    tier: str | None = None
    state: RunState | None = None
    search: str = ""


SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    spec TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    position INTEGER NOT NULL,
    created_at REAL NOT NULL,
    prompt TEXT NOT NULL,
    parameters TEXT NOT NULL,
    state TEXT NOT NULL,
    endpoint TEXT,
    job_id TEXT,
    error TEXT,
    timings TEXT,
    video_path TEXT,
    sidecar_path TEXT,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_run ON requests(run_id, position);
"""
# Added after the first release: a database without it gets it in place, its runs the local operator's.
VISITOR_COLUMN = f"ALTER TABLE runs ADD COLUMN visitor TEXT NOT NULL DEFAULT '{LOCAL_OPERATOR.id}'"
VISITOR_INDEX = "CREATE INDEX IF NOT EXISTS runs_visitor ON runs(visitor, created_at)"
# Requests that count towards a visitor's videos per hour: all but those that ended without a video.
UNCOUNTED_STATES = ("failed", "cancelled", "lost")


# The columns of a request that follow it as it moves (update_request, finish_requests).
UPDATABLE_COLUMNS = ("state", "endpoint", "job_id", "error", "timings", "video_path", "sidecar_path")


class OutputsFull(RuntimeError):
    """The outputs folder's disk has no room left for what was to be written; nothing of it was kept."""


@dataclass(frozen=True)
class NewRequest:
    """A request's first history row, written with its run."""

    id: str
    position: int
    created_at: float
    prompt: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class SavedVideo:
    video_path: Path
    sidecar_path: Path


class OutputStore:
    """The outputs dir and its history database. Thread-safe; one connection guarded by a lock."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.videos_dir = self.root / "videos"
        self.logs_dir = self.root / "logs"
        # The folder is its owner's alone (0700), so nothing in it reaches others on the machine, whatever rights a
        # file came with; the studio's start makes what it writes 0600 besides (studio.startup.private_files).
        private_folder(self.root)
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "history.sqlite3", check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            # In WAL mode a commit without its own fsync is still whole after a crash of the studio (the log is
            # synced at each checkpoint): the history stays consistent, and a state change costs no disk flush
            # on the event loop it is written from.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            columns = {row["name"] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "visitor" not in columns:
                self._db.execute(VISITOR_COLUMN)
            self._db.execute(VISITOR_INDEX)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def video_path_for(self, request_id: str, created_at: float) -> Path:
        day = time.strftime("%Y-%m-%d", time.localtime(created_at))
        return self.videos_dir / day / f"{request_id}.mp4"

    # ---- history rows ------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self, what: str) -> Iterator[sqlite3.Connection]:
        """One transaction, under the lock: all of it is written, or (rolled back) none. A full disk raises
        OutputsFull, saying so in words a user acts on."""
        with self._lock:
            try:
                with self._db:
                    yield self._db
            except sqlite3.OperationalError as exc:
                if self._db.in_transaction:
                    self._db.rollback()
                if _disk_full(exc):
                    raise OutputsFull(
                        f"no space left on the outputs folder ({self.root}): {what} was not saved ({exc}); free some "
                        "space there and try again"
                    ) from exc
                raise

    def add_run(
        self,
        run_id: str,
        spec: dict[str, Any],
        created_at: float,
        visitor_id: str = LOCAL_OPERATOR.id,
        requests: Iterable[NewRequest] = (),
    ) -> None:
        """A run and its requests (each 'waiting'), in one transaction: history never holds half a run. Raises
        OutputsFull where the disk has no room for it."""
        now = time.time()
        rows = [(r.id, run_id, r.position, r.created_at, r.prompt, json.dumps(r.parameters), now) for r in requests]
        with self._transaction("the run") as db:
            db.execute(
                "INSERT INTO runs (id, created_at, spec, visitor) VALUES (?, ?, ?, ?)",
                (run_id, created_at, json.dumps(spec), visitor_id),
            )
            db.executemany(
                "INSERT INTO requests (id, run_id, position, created_at, prompt, parameters, state, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?)",
                rows,
            )

    def add_request(
        self, request_id: str, run_id: str, position: int, created_at: float, prompt: str, parameters: dict
    ) -> None:
        with self._transaction("the request") as db:
            db.execute(
                "INSERT INTO requests (id, run_id, position, created_at, prompt, parameters, state, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?)",
                (request_id, run_id, position, created_at, prompt, json.dumps(parameters), time.time()),
            )

    def update_request(self, request_id: str, **values: Any) -> None:
        encoded = _encoded(values)
        assignments = ", ".join(f"{name} = ?" for name in encoded)
        with self._lock, self._db:
            self._db.execute(f"UPDATE requests SET {assignments} WHERE id = ?", (*encoded.values(), request_id))

    def finish_requests(self, updates: list[tuple[str, dict[str, Any]]]) -> None:
        """Many requests' rows at once, in one transaction (a run cancelled as a whole): each (id, columns), all with
        the same columns. Time in proportion to how many; meant for a worker thread, off the event loop."""
        if not updates:
            return
        names = list(_encoded(updates[0][1]))
        assignments = ", ".join(f"{name} = ?" for name in names)
        rows = []
        for request_id, values in updates:
            encoded = _encoded(values)
            if list(encoded) != names:
                raise ValueError(f"finish_requests takes the same columns for every request: {names}")
            rows.append((*encoded.values(), request_id))
        with self._transaction(f"the outcome of {len(rows)} requests") as db:
            db.executemany(f"UPDATE requests SET {assignments} WHERE id = ?", rows)

    def request_row(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
        return _decode(row) if row else None

    def owner_of(self, run_or_request_id: str) -> str | None:
        """The visitor whose run this is, or whose run this request is part of; None if history has no such id."""
        with self._lock:
            row = self._db.execute(
                "SELECT visitor FROM runs WHERE id = ?"
                " UNION ALL SELECT r.visitor FROM requests q JOIN runs r ON r.id = q.run_id WHERE q.id = ?",
                (run_or_request_id, run_or_request_id),
            ).fetchone()
        return row["visitor"] if row else None

    def run_requests(self, run_id: str, visitor_id: str | None = None) -> list[dict[str, Any]]:
        """The requests of a run, in order; with `visitor_id`, only if the run is theirs (None: anyone's)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT q.* FROM requests q JOIN runs r ON r.id = q.run_id"
                " WHERE q.run_id = ? AND (? IS NULL OR r.visitor = ?) ORDER BY q.position",
                (run_id, visitor_id, visitor_id),
            ).fetchall()
        return [_decode(row) for row in rows]

    def recent_runs(
        self, limit: int = 50, visitor_id: str | None = None, only: RunFilter | None = None
    ) -> list[dict[str, Any]]:
        """The newest runs with their requests counted by how they ended; with `visitor_id`, only theirs; with
        `only`, those it keeps (bench runs are kept only where it asks for them)."""
        where, having, values = ["(? IS NULL OR r.visitor = ?)"], [], [visitor_id, visitor_id]
        if only is not None:
            if not only.bench:
                where.append("COALESCE(json_extract(r.spec, '$.bench'), 0) = 0")
            if only.tier is not None:
                where.append("json_extract(r.spec, '$.tier') = ?")
                values.append(only.tier)
            if only.search:
                where.append("EXISTS (SELECT 1 FROM requests s WHERE s.run_id = r.id AND s.prompt LIKE ? ESCAPE '\\')")
                values.append("%" + "".join("\\" + c if c in "%_\\" else c for c in only.search) + "%")
            if only.state is not None:
                having.append(RUN_STATES[only.state])
        query = (
            "SELECT r.id, r.created_at, r.spec, r.visitor, COUNT(q.id) AS requests,"
            " SUM(q.state = 'done') AS done, SUM(q.state = 'failed') AS failed,"
            " SUM(q.state = 'cancelled') AS cancelled"
            " FROM runs r LEFT JOIN requests q ON q.run_id = r.id"
            f" WHERE {' AND '.join(where)} GROUP BY r.id"
            + (f" HAVING {' AND '.join(having)}" if having else "")
            + " ORDER BY r.created_at DESC LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(query, (*values, limit)).fetchall()
        return [{**dict(row), "spec": json.loads(row["spec"])} for row in rows]

    def requests_since(self, visitor_id: str, since: float) -> int:
        """A visitor's requests made since `since` that did not end without a video (their videos per hour)."""
        marks = ", ".join("?" for _ in UNCOUNTED_STATES)
        with self._lock:
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM requests q JOIN runs r ON r.id = q.run_id"
                f" WHERE r.visitor = ? AND q.created_at >= ? AND q.state NOT IN ({marks})",
                (visitor_id, since, *UNCOUNTED_STATES),
            ).fetchone()
        return int(count)

    def mark_unfinished_lost(self) -> int:
        """At start-up: requests a previous studio left before any server took them are marked lost, never
        silently dropped. Those a server accepted (they have a job id) are left for `resumable()`."""
        with self._lock, self._db:
            cursor = self._db.execute(
                "UPDATE requests SET state = 'lost', error = 'the studio stopped before a server took this request',"
                " updated_at = ? WHERE state IN ('waiting', 'queued', 'running', 'downloading') AND job_id IS NULL",
                (time.time(),),
            )
        return cursor.rowcount

    def resumable(self) -> list[dict[str, Any]]:
        """Requests a previous studio left at a server (job id known), to be followed up by that id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT q.*, r.visitor FROM requests q JOIN runs r ON r.id = q.run_id"
                " WHERE q.state IN ('queued', 'running', 'downloading') AND q.job_id IS NOT NULL"
                " ORDER BY q.created_at"
            ).fetchall()
        return [_decode(row) for row in rows]

    # ---- files -------------------------------------------------------------------------------------
    def write_sidecar(self, video_path: Path, sidecar: dict[str, Any]) -> Path:
        """JSON next to the mp4, written atomically (tmp file, fsync, rename)."""
        path = Path(video_path).with_suffix(".json")
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(sidecar, handle, indent=2, sort_keys=True, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
        return path


def _encoded(values: dict[str, Any]) -> dict[str, Any]:
    """A request's columns as SQLite takes them, with the time of the change; unknown columns are refused."""
    unknown = set(values) - set(UPDATABLE_COLUMNS)
    if unknown:
        raise ValueError(f"unknown request columns: {sorted(unknown)}")
    encoded = {
        k: json.dumps(v) if isinstance(v, dict) else (str(v) if isinstance(v, Path) else v) for k, v in values.items()
    }
    encoded["updated_at"] = time.time()
    return encoded


def _disk_full(exc: sqlite3.Error) -> bool:
    """SQLite's "database or disk is full", or a write that failed for want of space."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc).lower()
    return code == sqlite3.SQLITE_FULL or "disk is full" in text or "no space left" in text


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for key in ("parameters", "timings"):
        if data.get(key):
            data[key] = json.loads(data[key])
    return data
