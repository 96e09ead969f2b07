"""Start-to-ready of the embedded engine server as a user starts it: cold (an empty compile cache), then warm
restarts from that cache, each a fresh `python -m studio.engine` process with the engine's own defaults (its
default warm-up sizes and batch sizes), in one run.

    python benchmarks/gpu/engine_restart.py --out DIR                      # cold, warm, warm
    python benchmarks/gpu/engine_restart.py --out DIR --starts cold,warm --sample-last

Model: the random-weight Wan 2.1 1.3B architecture of benchmarks/harness/wan_model.py (text encoder cut to 2
layers), saved to a folder once. Each start is timed from its launch to its first `/health` answer (the
server answers only once its warm-up is done). The phases come from the server's own log lines (their clock
times against the launch): the first log line (the model loaded), each warm-up run, the CUDA graphs, the replays. After each
start, one request per warmed tier (20 steps, CFG 5) shows that a request after a warm start runs at the
speed of one after a cold start; then the server is stopped with SIGTERM and the stop is timed.

`--sample-last` runs the last start under benchmarks/harness/stack_sampler.py (every thread's stack every 10 ms;
DIR/stacks-<start>.txt), which slows that start a little: its time is reported apart.

Writes DIR/engine_restart.json and DIR/start-<n>-<kind>.log; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT
from benchmarks.harness.servers import wait_healthy
from benchmarks.harness.wan_model import TIERS, saved_model
from studio.backend.servers.supervisor import free_port

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: (.*)$")
# Log lines that end a phase of start-up, in the order the server writes them.
PHASES = [
    ("loaded", re.compile(r"^loaded .* in [\d.]+ s")),
    ("compile cache", re.compile(r"^compile cache .*: (warm|ignored)")),
    ("VAE layout", re.compile(r"^VAE decode at")),
    ("warm-up run", re.compile(r"^warm-up (\d+x\d+x\d+ batch \d+): ([\d.]+) s")),
    ("graphs", re.compile(r"^CUDA graphs of the transformer: (\d+), captured in ([\d.]+) s")),
    ("replay", re.compile(r"^warm-up replay (\d+x\d+x\d+): ([\d.]+) s")),
    ("saved", re.compile(r"^compile cache .* saved")),
    ("complete", re.compile(r"^warm-up complete")),
    ("ready", re.compile(r"^ready to serve ([\d.]+) s")),
]


def log_events(log_path: Path, launched_unix: float) -> list[dict[str, Any]]:
    """The server's log lines that mark start-up phases, each with its seconds since the launch."""
    events = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = LOG_TIME.match(line)
        if not match:
            continue
        when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        message = match.group(2)
        for name, pattern in PHASES:
            found = pattern.match(message)
            if found:
                events.append({"phase": name, "at_s": round(when - launched_unix, 2), "detail": found.groups()})
                break
    return events


def first_log_at(log_path: Path, launched_unix: float) -> float | None:
    """Seconds from the launch to the server's first log line (after the imports and the model load: the first line is the compile cache opened)."""
    for line in log_path.read_text(errors="replace").splitlines():
        match = LOG_TIME.match(line)
        if match:
            return round(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - launched_unix, 2)
    return None


def wait_warm(url: str, server: subprocess.Popen, timeout_s: float) -> dict[str, Any]:
    """Until the server's background warm-up is complete (its /health says so); that warm-up state."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} while warming")
        warmup = httpx.get(url + "/health", timeout=5).json().get("warmup") or {"complete": True}
        if warmup.get("complete") or warmup.get("failed"):
            return warmup
        time.sleep(0.5)
    raise RuntimeError(f"the background warm-up did not finish within {timeout_s} s")


def one_request(url: str, model: str, tier: str, frames: int, steps: int, seed: int) -> dict[str, Any]:
    """One video through the engine's job API (create, poll until done); latency and the server's own times."""
    width, height = TIERS[tier]
    form = {
        "prompt": f"a red fox runs through snow, seed {seed}",
        "model": model,
        "size": f"{width}x{height}",
        "num_frames": str(frames),
        "num_inference_steps": str(steps),
        "guidance_scale": "5.0",
        "seed": str(seed),
    }
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as client:
        created = client.post("/v1/videos", data=form)
        created.raise_for_status()
        job_id = created.json()["id"]
        while True:
            job = client.get(f"/v1/videos/{job_id}").json()
            if job.get("status") in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.05)
    latency = time.perf_counter() - started
    if job.get("status") != "completed":
        raise RuntimeError(f"request at {tier} ended {job.get('status')}: {job.get('error')}")
    return {"latency_s": round(latency, 3), "inference_time_s": job.get("inference_time_s")}


def one_start(
    args: argparse.Namespace, model_dir: Path, cache_dir: Path, n: int, kind: str, sample: bool, save: Callable
) -> dict:
    """One server start, timed; `save(result)` after each figure, so that a run cut short keeps them."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = args.out / f"start-{n}-{kind}.log"
    command = [sys.executable]
    if sample:
        command += [
            str(ROOT / "benchmarks" / "harness" / "stack_sampler.py"),
            str(args.out / f"stacks-{n}-{kind}.txt"),
            "--",
        ]
    command += ["-m", "studio.engine", "--model", str(model_dir), "--port", str(port), "--no-guardrails"]
    command += ["--device", "cuda", "--compile-cache-dir", str(cache_dir), "--output-dir", tempfile.mkdtemp()]
    command += args.engine_args.split()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    launched_unix, launched = time.time(), time.perf_counter()
    with log_path.open("w") as log_file:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        result: dict[str, Any] = {"start": n, "kind": kind, "sampled": sample}
        try:
            wait_healthy(url, server, args.ready_timeout, interval_s=0.2)
            result["start_to_ready_s"] = round(time.perf_counter() - launched, 1)
            print(f"start {n} ({kind}): ready in {result['start_to_ready_s']} s", flush=True)
            save(result)
            requests = kind != "cold" or not args.no_cold_requests
            if requests:
                # The first requests may wait for the background warm-up's run in progress: their own figure.
                result["first_requests"] = {
                    tier: one_request(url, model_dir.name, tier, args.frames, args.steps, 100 + n)
                    for tier in args.tiers
                }
                save(result)
            result["warmup"] = wait_warm(url, server, args.ready_timeout)
            result["fully_warm_s"] = round(time.perf_counter() - launched, 1)
            print(f"start {n} ({kind}): every batch size warm in {result['fully_warm_s']} s", flush=True)
            save(result)
            if requests:
                result["requests"] = {
                    tier: one_request(url, model_dir.name, tier, args.frames, args.steps, 200 + n)
                    for tier in args.tiers
                }
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            print(f"start {n} ({kind}): {result['error']}", flush=True)
        finally:
            stopping = time.perf_counter()
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            result["stop_s"] = round(time.perf_counter() - stopping, 2)
    result["first_log_s"] = first_log_at(log_path, launched_unix)
    result["events"] = log_events(log_path, launched_unix)
    return result


def print_table(report: dict[str, Any]) -> None:
    print()
    tiers = report["tiers"]
    print(
        "| start | ready | every batch warm | first log | loaded | warm-up runs | graphs | replays | "
        + " | ".join(f"{t} first" for t in tiers)
        + " | "
        + " | ".join(tiers)
        + " | stop |"
    )
    for start in report["starts"]:
        events = start.get("events", [])
        at = {e["phase"]: e["at_s"] for e in events}  # the last of each phase
        runs = sum(float(e["detail"][1]) for e in events if e["phase"] == "warm-up run")
        graphs = sum(float(e["detail"][1]) for e in events if e["phase"] == "graphs")
        replays = sum(float(e["detail"][1]) for e in events if e["phase"] == "replay")
        firsts = [str((start.get("first_requests") or {}).get(t, {}).get("latency_s")) for t in tiers]
        latencies = [str((start.get("requests") or {}).get(t, {}).get("latency_s")) for t in tiers]
        print(
            f"| {start['start']} {start['kind']}{' (sampled)' if start['sampled'] else ''} | "
            f"{start.get('start_to_ready_s')} | {start.get('fully_warm_s')} | {start.get('first_log_s')} | "
            f"{at.get('loaded')} | {runs:.1f} | {graphs:.1f} | {replays:.1f} | "
            + " | ".join(firsts + latencies)
            + f" | {start.get('stop_s')} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--starts", default="cold,warm,warm", help="cold: an empty compile cache; warm: reuse it")
    parser.add_argument("--tiers", default="256p,480p", help="one request at each after every start")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--engine-args", default="", help="more flags for every start (default: the engine's)")
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--sample-last", action="store_true", help="the last start under the stack sampler")
    parser.add_argument("--no-cold-requests", action="store_true", help="no requests after a cold start")
    args = parser.parse_args()
    args.tiers = [t for t in args.tiers.split(",") if t]
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir, save_s = saved_model(argparse.Namespace(device="cuda", smoke=False))
    cache_dir = Path(tempfile.mkdtemp(prefix="engine-compile-"))
    report: dict[str, Any] = {"args": vars(args) | {"out": str(args.out)}, "save_s": save_s, "starts": []}
    report["tiers"] = args.tiers
    kinds = [k for k in args.starts.split(",") if k]
    for n, kind in enumerate(kinds, 1):
        if kind == "cold":
            cache_dir = Path(tempfile.mkdtemp(prefix="engine-compile-"))
        sample = args.sample_last and n == len(kinds)

        def save(result: dict[str, Any], n: int = n) -> None:
            report["starts"] = [*report["starts"][: n - 1], result]
            (args.out / "engine_restart.json").write_text(json.dumps(report, indent=1, default=str))

        save(one_start(args, model_dir, cache_dir, n, kind, sample, save))
    print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
