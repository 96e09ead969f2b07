"""The figures and checks of benchmarks/cpu/soak.py, from what it gathered: the crowd's ledger, the memory samples,
the studio's own records (run records, History, its database) and the logs. Pure functions, and the plot."""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness.stats import percentile
from studio.ui.tables import HISTORY_COLUMNS, HISTORY_ROWS

TERMINAL = ("done", "failed", "cancelled")
LOG_ERRORS = ("Traceback (most recent call last)", "Exception in ASGI application", "didn't return enough output")
GROWTH_LIMIT = 0.10
FD_SLACK = 8  # descriptors: a handful more (a pooled connection, a log reopened) is not a leak


# --- the studio's database, read-only -------------------------------------------------------------------------


def database_rows(database: Path) -> list[dict[str, Any]]:
    """Every request the studio recorded, with its run and visitor; [] when there is no database yet."""
    if not database.exists():
        return []
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as db:
        rows = db.execute(
            "SELECT r.id, r.run_id, r.state, r.error, r.timings, runs.visitor FROM requests r "
            "JOIN runs ON runs.id = r.run_id"
        ).fetchall()
    return [
        {"id": i, "run_id": run, "state": state, "error": error, "timings": json.loads(t or "{}"), "visitor": who}
        for i, run, state, error, t, who in rows
    ]


def engine_seconds(timings: dict[str, Any]) -> float:
    """The engine's own time on a request: its stage durations where it reports them, else its inference time."""
    value = timings.get("inference_min_s") or timings.get("server_inference_s") or 0.0
    return float(value)


def busy_fraction(rows: list[dict[str, Any]], start_unix: float, end_unix: float) -> float | None:
    """The engine's busy share of [start, end): the sum of the engine time of requests completed in it over its
    length (the engine makes one video at a time on the CPU)."""
    if end_unix <= start_unix:
        return None
    busy = sum(
        engine_seconds(row["timings"])
        for row in rows
        if start_unix <= float(row["timings"].get("completed") or 0.0) < end_unix
    )
    return busy / (end_unix - start_unix)


# --- minute by minute -----------------------------------------------------------------------------------------


def minutes_of(
    samples: list[dict[str, Any]],
    light: list[tuple[float, str, float]],
    rows: list[dict[str, Any]],
    clock0_unix: float,
    minutes: int,
) -> list[dict[str, Any]]:
    """One row per minute m (1..minutes, the minute that ends at the mark m): memory and open files (the median
    of the samples in it), the light calls' p50/p99, and the engine's busy fraction."""
    table = []
    for m in range(1, minutes + 1):
        lo, hi = (m - 1) * 60.0, m * 60.0
        inside = [s for s in samples if lo <= s["at_s"] < hi]
        times = [seconds for at, _name, seconds in light if lo <= at < hi]

        def median(key: str, inside: list[dict[str, Any]] = inside) -> float | None:
            values = [s[key] for s in inside if s.get(key) is not None]
            return round(statistics.median(values), 1) if values else None

        table.append(
            {
                "minute": m,
                "studio_rss_mb": median("studio_rss_mb"),
                "engine_rss_mb": median("engine_rss_mb"),
                "studio_fds": median("studio_fds"),
                "engine_fds": median("engine_fds"),
                "light_calls": len(times),
                "light_p50_s": percentile(times, 50),
                "light_p99_s": percentile(times, 99),
                "light_max_s": round(max(times), 4) if times else None,
                "busy": None if (b := busy_fraction(rows, clock0_unix + lo, clock0_unix + hi)) is None else round(b, 3),
            }
        )
    return table


def growth_window(minutes: int) -> tuple[int, int]:
    """From minute 10 to 60 of an hour: from a sixth of the run (at least minute 1) to its last minute."""
    return max(1, round(minutes / 6)), minutes


def growth(table: list[dict[str, Any]], key: str, window: tuple[int, int]) -> dict[str, Any]:
    first, last = (next((row[key] for row in table if row["minute"] == m), None) for m in window)
    if first is None or last is None or first == 0:
        return {"from": first, "to": last, "growth": None}
    return {"from": first, "to": last, "growth": round((last - first) / first, 4)}


def growth_by_process(
    samples: list[dict[str, Any]], key: str, window: tuple[int, int], pid_key: str = "engine_pid"
) -> list[dict[str, Any]]:
    """`key`'s growth within each process (the engine restarts: a new process is a new baseline): over the whole
    minutes it lived through (every sample of the minute from it), from its first whole minute plus the window's
    offset to its last whole minute. A minute counts its lowest sample: what the process keeps between requests
    (a request's own working memory comes and goes, and a busy minute's median would be mostly that). The offset is
    at least one minute: a new engine's first minute is its warm-up (the first request of each shape allocates what
    later ones reuse); a process that lived no whole minute past it has no growth to judge (None)."""
    lived: dict[int, list[tuple[int, float]]] = {}
    for m in range(1, window[1] + 1):
        inside = [s for s in samples if (m - 1) * 60.0 <= s["at_s"] < m * 60.0]
        pids = {s.get(pid_key) for s in inside}
        values = [s[key] for s in inside if s.get(key) is not None]
        if len(pids) == 1 and None not in pids and values:
            lived.setdefault(pids.pop(), []).append((m, round(min(values), 1)))
    found = []
    for pid, series in lived.items():
        first = series[min(max(window[0] - 1, 1), len(series) - 1)]
        last = series[-1]
        share = round((last[1] - first[1]) / first[1], 4) if last[0] > first[0] and first[1] else None
        found.append({"pid": pid, "minutes": (first[0], last[0]), "from": first[1], "to": last[1], "growth": share})
    return found


# --- every request accounted for ------------------------------------------------------------------------------


def accounting(
    submitted: list[dict[str, Any]],
    records: dict[str, dict[str, Any] | None],
    histories: dict[str, list[list[Any]]],
    everyone: list[list[Any]] | None,
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Compares what the clients submitted (run id, visitor, request ids) with the studio's run records (its
    /run_status at the end), each visitor's /history (the latest 100 runs), the operator's everyone view and the
    database. Problems name the run or request."""
    problems: list[str] = []
    states: Counter = Counter()
    reasons: Counter = Counter()
    submitted_ids: Counter = Counter(i for run in submitted for i in run["request_ids"])
    problems += [f"request {i} answered {n} times at submit" for i, n in submitted_ids.items() if n > 1]
    run_ids = Counter(run["run_id"] for run in submitted)
    problems += [f"run {r} answered {n} times at submit" for r, n in run_ids.items() if n > 1]
    record_state: dict[str, str] = {}
    for run in submitted:
        record = records.get(run["run_id"])
        if record is None:
            problems.append(f"run {run['run_id']} of {run['visitor']}: no record at the end (lost)")
            continue
        if not record["finished"]:
            problems.append(f"run {run['run_id']} of {run['visitor']}: not finished at the end")
        seen = [r["id"] for r in record["requests"]]
        if sorted(seen) != sorted(run["request_ids"]) or len(set(seen)) != len(seen):
            problems.append(f"run {run['run_id']}: submitted {run['request_ids']}, its record holds {seen}")
        for request in record["requests"]:
            state = request["state"]
            record_state[request["id"]] = state
            states[state] += 1
            if state not in TERMINAL:
                problems.append(f"request {request['id']}: {state} at the end")
            elif state == "failed":
                reason = (request.get("error") or "").strip()
                reasons[reason.splitlines()[0][:100] if reason else "(no reason)"] += 1
                if not reason:
                    problems.append(f"request {request['id']}: failed without a reason")
            elif state == "done" and not request.get("video_url"):
                problems.append(f"request {request['id']}: done without a video")
    by_visitor: dict[str, list[dict[str, Any]]] = {}
    for run in submitted:
        by_visitor.setdefault(run["visitor"], []).append(run)
    for visitor, table in histories.items():
        problems += _history_problems(visitor, table, by_visitor.get(visitor, []), records)
    if everyone is not None:
        shown = Counter(str(row[0]) for row in everyone)
        problems += [f"everyone's History shows run {r} {n} times" for r, n in shown.items() if n > 1]
        problems += [f"everyone's History shows run {r}, which no one submitted" for r in shown if r not in run_ids]
    database = {row["id"]: row for row in rows}
    problems += [f"request {i} is in the database, no client submitted it" for i in database if i not in submitted_ids]
    problems += [f"request {i} submitted, not in the database" for i in submitted_ids if i not in database]
    for i, row in database.items():
        if i in record_state and row["state"] != record_state[i]:
            problems.append(f"request {i}: {record_state[i]} in its run record, {row['state']} in the database")
        if row["state"] not in TERMINAL:
            problems.append(f"request {i}: {row['state']} in the database at the end")
    return {
        "runs": len(submitted),
        "requests": sum(submitted_ids.values()),
        "states": dict(states),
        "failed_reasons": dict(reasons.most_common()),
        "database_requests": len(database),
        "problems": problems,
        "ok": not problems,
    }


def _history_problems(
    visitor: str, table: list[list[Any]], runs: list[dict[str, Any]], records: dict[str, dict[str, Any] | None]
) -> list[str]:
    """History's rows (the page's HISTORY_COLUMNS; its latest HISTORY_ROWS runs, newest first) against the visitor's own
    runs and their records."""
    counted = [HISTORY_COLUMNS.index(name) for name in ("requests", "done", "failed", "cancelled")]
    problems = []
    shown = Counter(str(row[0]) for row in table)
    mine = {run["run_id"] for run in runs}
    problems += [f"{visitor}'s History shows run {r} {n} times" for r, n in shown.items() if n > 1]
    problems += [f"{visitor}'s History shows run {r}, not theirs" for r in shown if r not in mine]
    latest = [run["run_id"] for run in sorted(runs, key=lambda run: run["at_s"])][-HISTORY_ROWS:]
    problems += [f"{visitor}'s History misses run {r}" for r in latest if r not in shown]
    for row in table:
        record = records.get(str(row[0]))
        if record is None:
            continue
        counts = Counter(r["state"] for r in record["requests"])
        expected = [len(record["requests"]), counts["done"], counts["failed"], counts["cancelled"]]
        shown_counts = [int(row[column] or 0) for column in counted]
        if shown_counts != expected:
            problems.append(f"{visitor}'s History row {row[0]}: {shown_counts}, its record says {expected}")
    return problems


# --- logs -----------------------------------------------------------------------------------------------------


def log_errors(paths: list[Path]) -> dict[str, list[str]]:
    """Each log's lines that tell of an error (a traceback, an exception Gradio caught and logged)."""
    found = {}
    for path in paths:
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        hits = [f"{n + 1}: {line[:200]}" for n, line in enumerate(lines) if any(mark in line for mark in LOG_ERRORS)]
        found[str(path)] = hits
    return found


# --- the plot -------------------------------------------------------------------------------------------------


def plot_memory(samples: list[dict[str, Any]], events: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["at_s"] / 60 for s in samples]
    figure, (memory, files) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, height_ratios=(2, 1))
    for key, label in (("studio_rss_mb", "studio"), ("engine_rss_mb", "engine")):
        memory.plot(minutes, [s.get(key) for s in samples], label=f"{label} RSS", linewidth=1.2)
    for key, label in (("studio_fds", "studio"), ("engine_fds", "engine")):
        files.plot(minutes, [s.get(key) for s in samples], label=f"{label} open files", linewidth=1.2)
    for event in events:
        for axis in (memory, files):
            axis.axvline(event["at_s"] / 60, color="gray", linestyle=":", linewidth=1)
        memory.annotate(event["action"], (event["at_s"] / 60, memory.get_ylim()[1]), fontsize=8, rotation=90,
                        va="top", ha="right", color="gray")  # fmt: skip
    memory.set_ylabel("RSS (MB)")
    files.set_ylabel("open files")
    files.set_xlabel("minutes")
    memory.set_title(title)
    memory.legend(loc="lower right")
    files.legend(loc="lower right")
    memory.grid(alpha=0.3)
    files.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
