"""The embedded engine's memory for one long request at a large size: its resident memory at idle, and its peak
while it makes one clip (by default 720p 16:9, 200 frames) on the CPU, on this checkout and, with --baseline REV,
on a git revision of this repository side by side (laid out in a temporary worktree, as side_by_side.py does);
then what it keeps once idle again (sampled for --after-s seconds, past the engine's idle release of its heap), and
the same request's seconds once more after that idle time.

The engine runs the project's small model (it makes every clip at a small native size, which the engine resizes to
the request's). Its RSS, with its children's, is sampled every --interval-s seconds from the request's submission to
its end. Prints a table and JSON (--json FILE writes it too); exits 1 where this checkout's peak above idle passes
--bound-mb.

Usage: python benchmarks/cpu/engine_memory.py [--baseline REV] [--size 1280x720] [--frames 200] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT
from benchmarks.harness.servers import other_checkout, stop_group, wait_healthy
from studio.backend.servers.supervisor import free_port

MODEL = ROOT / "assets" / "omni-small-t2v"  # the same model for both checkouts
START_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 1800.0


def rss_bytes(process: psutil.Process) -> int:
    """The process's resident memory with all of its children's."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


class PeakSampler:
    """The highest `rss_bytes` seen, sampled on a thread every `interval_s` until stopped."""

    def __init__(self, process: psutil.Process, interval_s: float) -> None:
        self.process, self.interval_s = process, interval_s
        self.peak, self.samples = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.process))
            self.samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.process))


def timed_request(http: httpx.Client, fields: dict[str, str], log: Path) -> float:
    """Seconds from submitting one request to its completion (polled every 0.2 s)."""
    started = time.perf_counter()
    job = http.post("/v1/videos", files={k: (None, v) for k, v in fields.items()})
    job.raise_for_status()
    job_id = job.json()["id"]
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        record = http.get(f"/v1/videos/{job_id}").json()
        if record["status"] in ("completed", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if record["status"] != "completed":
        raise SystemExit(f"the request did not complete: {record}\n{log.read_text()[-3000:]}")
    return time.perf_counter() - started


def measure(checkout: Path, args: argparse.Namespace, work: Path) -> dict:
    """One engine from `checkout`: idle RSS, then one request's peak."""
    port = free_port()
    log = work / "engine.log"
    command = [
        sys.executable,
        "-m",
        "studio.engine",
        *("--model", str(MODEL), "--device", "cpu", "--threads", str(args.threads)),
        *("--port", str(port), "--output-dir", str(work / "out"), "--log-level", "warning"),
    ]
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
    with log.open("wb") as handle:
        engine = subprocess.Popen(
            command, cwd=checkout, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, engine, START_TIMEOUT_S, log)
        process = psutil.Process(engine.pid)
        idle = []
        for _ in range(int(args.idle_s / 0.1)):
            idle.append(rss_bytes(process))
            time.sleep(0.1)
        idle_bytes = statistics.median(idle)
        fields = {
            "prompt": "a red circle moving left on white",
            "size": args.size,
            "num_frames": str(args.frames),
            "num_inference_steps": str(args.steps),
            "seed": "1",
        }
        with PeakSampler(process, args.interval_s) as sampler, httpx.Client(base_url=url, timeout=60) as http:
            seconds = timed_request(http, fields, log)
        after = []  # the engine idle again: what it keeps of the request's memory, sampled past its idle release
        for _ in range(int(args.after_s / 0.1)):
            after.append(rss_bytes(process))
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=60) as http:
            again = timed_request(http, fields, log)  # the same request once the engine has let its memory go
        return {
            "idle_mb": round(idle_bytes / 2**20, 1),
            "peak_mb": round(sampler.peak / 2**20, 1),
            "above_idle_mb": round((sampler.peak - idle_bytes) / 2**20, 1),
            "idle_after_mb": round(min(after[-10:]) / 2**20, 1),
            "seconds": round(seconds, 1),
            "again_after_idle_s": round(again, 1),
            "samples": sampler.samples,
        }
    finally:
        stop_group(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="a git revision measured the same way, side by side")
    parser.add_argument("--size", default="1280x720", help="the request's WxH (default: 720p 16:9)")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--steps", type=int, default=4, help="denoising steps (the model's native size is small)")
    parser.add_argument("--threads", type=int, default=2, help="the engine's CPU threads")
    parser.add_argument("--interval-s", type=float, default=0.02, help="how often the RSS is sampled")
    parser.add_argument("--idle-s", type=float, default=2.0, help="how long the idle RSS is sampled")
    parser.add_argument(
        "--after-s", type=float, default=8.0, help="how long the RSS is sampled once the request is done"
    )
    parser.add_argument("--bound-mb", type=float, default=1536.0, help="this checkout's peak above idle, at most")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="engine-memory-") as tmp:
        work = Path(tmp)
        (work / "this").mkdir()
        results["this"] = measure(ROOT, args, work / "this")
        if args.baseline:
            with other_checkout(args.baseline, work / "baseline") as other:
                (work / "baseline-run").mkdir()
                results[args.baseline] = measure(other, args, work / "baseline-run")
    this = results["this"]
    report: dict = {
        "request": {"size": args.size, "frames": args.frames, "steps": args.steps, "threads": args.threads},
        "results": results,
        "bound_above_idle_mb": args.bound_mb,
        "within_bound": this["above_idle_mb"] <= args.bound_mb,
    }
    if args.baseline:
        before = results[args.baseline]
        report["ratio_peak_baseline_over_this"] = round(before["peak_mb"] / this["peak_mb"], 2)
        report["ratio_above_idle_baseline_over_this"] = round(
            before["above_idle_mb"] / max(this["above_idle_mb"], 1), 2
        )
        report["ratio_idle_after_baseline_over_this"] = round(before["idle_after_mb"] / this["idle_after_mb"], 2)
        report["ratio_again_this_over_baseline"] = round(this["again_after_idle_s"] / before["again_after_idle_s"], 2)
    print(f"{args.size} x {args.frames} frames, {args.steps} steps, {args.threads} threads (CPU)")
    print("| checkout | idle MB | peak MB | above idle MB | idle after MB | seconds | again, after idle s |")
    print("|---|---|---|---|---|---|---|")
    for name, f in results.items():
        print(
            f"| {name} | {f['idle_mb']} | {f['peak_mb']} | {f['above_idle_mb']} | {f.get('idle_after_mb', '–')} "
            f"| {f['seconds']} | {f.get('again_after_idle_s', '–')} |"
        )
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["within_bound"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
