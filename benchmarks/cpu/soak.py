"""An hour with a crowd: a studio with sign-in on the embedded engine, used through the page's API by three
visitors and an operator, at a pace that keeps the engine busy about half the time.

    python benchmarks/cpu/soak.py                       # 60 minutes
    python benchmarks/cpu/soak.py --minutes 5 --out DIR --seed 7

The studio starts as a user starts it (`python -m studio ui --auth alice:pw1 ... --operator dave`, the small
model). After one warm-up request, the clock starts: alice, bob and carol submit runs (prompts of the small
model's grammar, 256p, 9 to 33 frames, 2 to 4 steps), cancel some (a request, or all their work), wait with short
long-polls, browse History, export and fetch files; dave browses everyone's History, halves `visitor_max_queued`
at 30% of the run and puts it back at 40%, and restarts the engine at 50% (benchmarks/cpu/soak_crowd.py). Every 15 s
the visitors' think time follows the engine's busy fraction over the last minute (the engine time of the requests
completed in it, from the studio's history database) towards 50%. The studio's and the engine's memory (RSS) and
open files are sampled every 5 s. At the end, the visitors wait for their last runs (after 3 minutes they cancel
what is left of them, as one who gives up would), the records are compared, and the studio is stopped.

Checks (benchmarks/cpu/soak_report.py), each pass/fail in DIR/report.json, the failed ones named on exit (status 1):
- accounted: every request submitted is done, cancelled or failed with a reason; none lost, none duplicated (the
  clients' submissions against the run records, each visitor's History, the operator's everyone view and the
  database);
- memory_growth / open_files_growth: the studio's RSS (open files) from minute 10 to minute 60 (from a sixth of a
  shorter run to its end) grows by at most 10% (open files: or 8 descriptors); so does each engine process's, over
  the whole minutes it lived (the restart starts a new one), from the same offset into its life (past its first,
  warm-up minute) to its end;
- light_calls: each minute's p99 of /run_status and /history is within --light-p99-s (2 s);
- no_traceback: neither the studio's log nor the engine's (under the outputs folder) holds a traceback;
- operator: the sharing change, its undo and the restart were applied;
- calls: every API call and file fetch got an answer (a refusal is an answer), and no client thread died.

Writes DIR/report.json, DIR/memory.png, DIR/studio.log and the studio's outputs under DIR/outputs; prints a
summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.cpu import soak_report as report
from benchmarks.cpu.soak_crowd import Caller, Ledger, Operator, Pacer, Submitted, Visitor
from tests.studio_process import RunningStudio, start_studio, stop_studio

VISITORS = {"alice": "pw1", "bob": "pw2", "carol": "pw3"}
OPERATOR = ("dave", "pw4")
TARGET_BUSY = 0.5
SAMPLE_S = 5.0
PACE_S = 15.0  # how often the think time follows the busy fraction
PACE_WINDOW_S = 60.0
START_TIMEOUT_S = 180.0
PLAN = (("sharing", 0.3), ("sharing back", 0.4), ("restart", 0.5))  # the operator's actions, as run fractions


def start_crowd_studio(outputs: Path, log: Path) -> RunningStudio:
    """The studio with the four accounts, the operator among them."""
    accounts = [arg for user, pw in (*VISITORS.items(), OPERATOR) for arg in ("--auth", f"{user}:{pw}")]
    return start_studio(outputs, log, *accounts, "--operator", OPERATOR[0], timeout_s=START_TIMEOUT_S)


def sample(studio: psutil.Process, at_s: float) -> dict[str, Any]:
    """The studio's and its engine's (the child running studio.engine) RSS and open files now."""
    row: dict[str, Any] = {"at_s": round(at_s, 1)}
    with contextlib.suppress(psutil.Error):
        row.update(studio_rss_mb=studio.memory_info().rss / 2**20, studio_fds=studio.num_fds())
        for child in studio.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "studio.engine" in " ".join(child.cmdline()):
                    row.update(
                        engine_pid=child.pid, engine_rss_mb=child.memory_info().rss / 2**20, engine_fds=child.num_fds()
                    )
                    break
    return row


class Watch(threading.Thread):
    """Samples memory every SAMPLE_S and moves the think time every PACE_S, until stopped."""

    def __init__(self, studio: psutil.Process, ledger: Ledger, pacer: Pacer, database: Path) -> None:
        super().__init__(name="watch", daemon=True)
        self.studio = studio
        self.ledger = ledger
        self.pacer = pacer
        self.database = database
        self.samples: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.pacing = True

    def run(self) -> None:
        next_pace = time.monotonic() + PACE_S
        while not self.stopping.is_set():
            self.samples.append(sample(self.studio, self.ledger.now_s()))
            if self.pacing and time.monotonic() >= next_pace:
                next_pace += PACE_S
                now = time.time()
                since = now - min(PACE_WINDOW_S, self.ledger.now_s())
                try:
                    busy = report.busy_fraction(report.database_rows(self.database), since, now)
                except Exception:  # a database busy at this moment: the next tick reads it
                    busy = None
                self.pacer.adjust(self.ledger.now_s(), busy)
            self.stopping.wait(SAMPLE_S)


def final_records(callers: dict[str, Caller], ledger: Ledger) -> dict[str, dict[str, Any] | None]:
    """Each run's record now, asked by its own visitor."""
    return {run.run_id: callers[run.visitor].call("/run_status", run_id=run.run_id) for run in ledger.runs}


def warm_up(operator: Caller, ledger: Ledger) -> None:
    """One small request, waited for: the engine has loaded and made a video before the clock starts."""
    answer = operator.client.predict(prompts="a red circle moving left", frames=9, steps=2, api_name="/submit_run")
    ledger.runs.append(Submitted(OPERATOR[0], answer["run_id"], [r["id"] for r in answer["requests"]], 0.0))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if operator.client.predict(run_id=answer["run_id"], timeout_s=20, api_name="/wait_run")["finished"]:
            return
    raise RuntimeError("the warm-up request did not finish")


def run_seconds(ledger: Ledger) -> dict[str, Any]:
    """How long runs took, from submit to their visitor seeing them finished; the runs cancelled at the drain."""
    took = [run.finished_s - run.at_s for run in ledger.runs if run.finished_s is not None]
    return {
        "p50_s": report.percentile(took, 50),
        "p99_s": report.percentile(took, 99),
        "max_s": round(max(took), 1) if took else None,
        "cancelled_at_drain": [run.run_id for run in ledger.runs if run.drain_cancelled],
    }


def checks(figures: dict[str, Any], light_p99_s: float) -> dict[str, dict[str, Any]]:
    """Each check: ok, and what it saw."""
    window = figures["growth_window"]
    found = figures["growth"]

    def within(key: str, slack: float = 0.0) -> bool:
        """The studio's growth over the window, and each engine process's over the whole minutes it lived."""
        studio = found[f"studio_{key}"]
        engines = [value for value in found[f"engine_{key}"] if value["growth"] is not None]
        return all(
            value["growth"] is not None
            and (value["growth"] <= report.GROWTH_LIMIT or value["to"] - value["from"] <= slack)
            for value in (studio, *engines)
        )

    slow = [row["minute"] for row in figures["per_minute"] if (row["light_p99_s"] or 0) > light_p99_s]
    quiet = [row["minute"] for row in figures["per_minute"] if not row["light_calls"]]
    errors = {path: lines for path, lines in figures["log_errors"].items() if lines}
    crowd = figures["crowd"]
    operator = figures["operator_events"]
    return {
        "accounted": {"ok": figures["accounting"]["ok"], "problems": figures["accounting"]["problems"][:20]},
        "memory_growth": {
            "ok": within("rss_mb"),
            "minutes": window,
            "studio": found["studio_rss_mb"],
            "engine": found["engine_rss_mb"],
        },
        "open_files_growth": {
            "ok": within("fds", report.FD_SLACK),
            "minutes": window,
            "studio": found["studio_fds"],
            "engine": found["engine_fds"],
        },
        "light_calls": {"ok": not slow and not quiet, "limit_p99_s": light_p99_s, "slow": slow, "none": quiet},
        "no_traceback": {"ok": not errors, "found": {path: lines[:5] for path, lines in errors.items()}},
        "operator": {
            "ok": sorted(e["action"] for e in operator if e["ok"]) == sorted(name for name, _ in PLAN),
            "events": operator,
        },
        "calls": {
            "ok": not crowd["transport_errors"] and not crowd["file_failures"] and not crowd["thread_failures"],
            "transport_errors": crowd["transport_errors"][:10],
            "file_failures": crowd["file_failures"][:10],
            "thread_failures": crowd["thread_failures"],
        },
    }


def soak(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outputs, log = out / "outputs", out / "studio.log"
    database = outputs / "history.sqlite3"
    studio = start_crowd_studio(outputs, log)
    try:
        return crowd_on(studio, outputs, log, database, args)
    finally:
        stop_studio(studio)


def crowd_on(
    studio: RunningStudio, outputs: Path, log: Path, database: Path, args: argparse.Namespace
) -> dict[str, Any]:
    ledger = Ledger(clock0=time.monotonic())
    callers = {user: Caller(studio.url, user, pw, ledger) for user, pw in (*VISITORS.items(), OPERATOR)}
    warm_up(callers[OPERATOR[0]], ledger)
    pacer = Pacer(think_s=args.think_s, target=TARGET_BUSY)
    ledger.clock0 = time.monotonic()
    clock0_unix = time.time()
    watch = Watch(psutil.Process(studio.process.pid), ledger, pacer, database)
    watch.start()
    length_s = args.minutes * 60.0
    stop_at = ledger.clock0 + length_s
    visitors = [
        Visitor(callers[user], ledger, pacer, stop_at, random.Random(f"{args.seed}-{user}"), args.blocked)
        for user in VISITORS
    ]
    operator = Operator(callers[OPERATOR[0]], ledger, stop_at, [(f * length_s, name) for name, f in PLAN])
    for thread in (*visitors, operator):
        thread.start()
    for thread in (*visitors, operator):
        thread.join()
    watch.pacing = False
    ended_s = ledger.now_s()
    records = final_records(callers, ledger)
    histories = {user: (callers[user].call("/history", show="mine") or {}).get("data", []) for user in VISITORS}
    everyone = (callers[OPERATOR[0]].call("/history", show="everyone") or {}).get("data")
    watch.stopping.set()
    watch.join()
    for caller in callers.values():
        caller.close()
    stop_studio(studio)
    rows = report.database_rows(database)
    minutes = max(1, math.floor(args.minutes + 1e-9))
    table = report.minutes_of(watch.samples, ledger.light, rows, clock0_unix, minutes)
    window = report.growth_window(minutes)
    submitted = [
        {"visitor": r.visitor, "run_id": r.run_id, "request_ids": r.request_ids, "at_s": r.at_s} for r in ledger.runs
    ]
    logs = [log, *sorted((outputs / "logs").rglob("*.log"))]
    figures: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "minutes": args.minutes,
        "seed": args.seed,
        "cpu_count": os.cpu_count(),
        "traffic_s": round(ended_s, 1),
        "busy_fraction": report.busy_fraction(rows, clock0_unix, clock0_unix + length_s),
        "target_busy": TARGET_BUSY,
        "pace": pacer.history,
        "run_seconds": run_seconds(ledger),
        "accounting": report.accounting(submitted, records, histories, everyone, rows),
        "per_minute": table,
        "growth_window": window,
        "growth": {
            **{key: report.growth(table, key, window) for key in ("studio_rss_mb", "studio_fds")},
            **{key: report.growth_by_process(watch.samples, key, window) for key in ("engine_rss_mb", "engine_fds")},
        },
        "light_overall": {
            "calls": len(ledger.light),
            "p50_s": report.percentile([s for _, _, s in ledger.light], 50),
            "p99_s": report.percentile([s for _, _, s in ledger.light], 99),
        },
        "log_errors": report.log_errors(logs),
        "operator_events": ledger.events,
        "crowd": {
            "calls": dict(ledger.calls),
            "refusals_and_errors": dict(ledger.app_errors.most_common()),
            "transport_errors": ledger.transport_errors,
            "files": dict(ledger.files),
            "file_failures": ledger.file_failures,
            "cancels": dict(ledger.cancels),
            "thread_failures": {t.name: t.failure for t in (*visitors, operator) if t.failure},
        },
        "engine_pids": sorted({s["engine_pid"] for s in watch.samples if s.get("engine_pid")}),
        "samples": watch.samples,
    }
    figures["checks"] = checks(figures, args.light_p99_s)
    figures["ok"] = all(check["ok"] for check in figures["checks"].values())
    return figures


def summary(figures: dict[str, Any]) -> str:
    a = figures["accounting"]
    lines = [
        f"soak: {figures['minutes']} min, {a['runs']} runs, {a['requests']} requests: {a['states']}",
        f"  engine busy {figures['busy_fraction'] or 0:.0%} (target {figures['target_busy']:.0%}); "
        f"light calls p50 {figures['light_overall']['p50_s']} s, p99 {figures['light_overall']['p99_s']} s "
        f"({figures['light_overall']['calls']} calls)",
    ]
    took = figures["run_seconds"]
    lines.append(
        f"  runs took p50 {took['p50_s']} s, p99 {took['p99_s']} s, max {took['max_s']} s (submit to finished); "
        f"cancelled at the drain: {len(took['cancelled_at_drain'])}"
    )
    if a["failed_reasons"]:
        lines.append("  failed: " + "; ".join(f"{n} × {why}" for why, n in a["failed_reasons"].items()))
    lines.append("  minute  studio MB  engine MB  studio fds  engine fds  light p50 s  light p99 s  busy")
    for row in figures["per_minute"]:
        lines.append(
            f"  {row['minute']:>6}  {row['studio_rss_mb'] or '-':>9}  {row['engine_rss_mb'] or '-':>9}  "
            f"{row['studio_fds'] or '-':>10}  {row['engine_fds'] or '-':>10}  {row['light_p50_s'] or '-':>11}  "
            f"{row['light_p99_s'] or '-':>11}  {row['busy'] if row['busy'] is not None else '-'}"
        )
    for key, values in figures["growth"].items():
        for value in values if isinstance(values, list) else [values]:
            share = "-" if value["growth"] is None else f"{value['growth']:+.1%}"
            who = f"engine pid {value['pid']}" if "pid" in value else "studio"
            span = value.get("minutes", figures["growth_window"])
            lines.append(f"  growth {key} ({who}) minutes {span}: {value['from']} -> {value['to']} ({share})")
    for event in figures["operator_events"]:
        lines.append(f"  operator {event['action']} at {event['at_s']} s, {event['took_s']} s: {event['answer'][:90]}")
    for name, check in figures["checks"].items():
        lines.append(f"  {'PASS' if check['ok'] else 'FAIL'} {name}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the crowd uses the studio")
    parser.add_argument("--out", default=None, help="folder for report.json, memory.png, the log and the outputs")
    parser.add_argument("--seed", type=int, default=1, help="the crowd's choices (prompts, sizes, cancels)")
    parser.add_argument("--think-s", type=float, default=3.0, help="the visitors' first mean think time")
    parser.add_argument("--blocked", type=float, default=0.03, help="share of runs with a blocked prompt")
    parser.add_argument("--light-p99-s", type=float, default=2.0, help="bound on a minute's light-call p99")
    args = parser.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="soak-")
    figures = soak(args)
    out = Path(args.out)
    (out / "report.json").write_text(json.dumps(figures, indent=1, default=str))
    report.plot_memory(
        figures["samples"],
        figures["operator_events"],
        out / "memory.png",
        f"Omni Studio soak: {figures['minutes']:g} min, 3 visitors + 1 operator, embedded engine",
    )
    print(summary(figures))
    print(f"report: {out / 'report.json'}, plot: {out / 'memory.png'}")
    failed = [name for name, check in figures["checks"].items() if not check["ok"]]
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
