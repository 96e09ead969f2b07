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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "history.sqlite3", check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def video_path_for(self, request_id: str, created_at: float) -> Path:
        day = time.strftime("%Y-%m-%d", time.localtime(created_at))
        return self.videos_dir / day / f"{request_id}.mp4"

    # ---- history rows ------------------------------------------------------------------------------
    def add_run(self, run_id: str, spec: dict[str, Any], created_at: float) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO runs (id, created_at, spec) VALUES (?, ?, ?)",
                (run_id, created_at, json.dumps(spec)),
            )

    def add_request(
        self, request_id: str, run_id: str, position: int, created_at: float, prompt: str, parameters: dict
    ) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO requests (id, run_id, position, created_at, prompt, parameters, state, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?)",
                (request_id, run_id, position, created_at, prompt, json.dumps(parameters), time.time()),
            )

    def update_request(self, request_id: str, **values: Any) -> None:
        allowed = {"state", "endpoint", "job_id", "error", "timings", "video_path", "sidecar_path"}
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"unknown request columns: {sorted(unknown)}")
        encoded = {
            k: json.dumps(v) if isinstance(v, dict) else (str(v) if isinstance(v, Path) else v)
            for k, v in values.items()
        }
        encoded["updated_at"] = time.time()
        assignments = ", ".join(f"{name} = ?" for name in encoded)
        with self._lock, self._db:
            self._db.execute(f"UPDATE requests SET {assignments} WHERE id = ?", (*encoded.values(), request_id))

    def request_row(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
        return _decode(row) if row else None

    def run_requests(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM requests WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()
        return [_decode(row) for row in rows]

    def recent_runs(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT r.id, r.created_at, r.spec, COUNT(q.id) AS requests,"
                " SUM(q.state = 'done') AS done, SUM(q.state = 'failed') AS failed"
                " FROM runs r LEFT JOIN requests q ON q.run_id = r.id"
                " GROUP BY r.id ORDER BY r.created_at DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [{**dict(row), "spec": json.loads(row["spec"])} for row in rows]

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
                "SELECT * FROM requests WHERE state IN ('queued', 'running', 'downloading') AND job_id IS NOT NULL"
                " ORDER BY created_at"
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


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for key in ("parameters", "timings"):
        if data.get(key):
            data[key] = json.loads(data[key])
    return data
