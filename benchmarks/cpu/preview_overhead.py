"""Previews on against off: the embedded engine's latency for jobs with previews and without, side by side in one
engine process. Rounds alternate which goes first: a job with previews (the server's default), then the same job
with extra_params {"previews": false}, or the other way round. Each job is sent as the studio sends it (a POST of
the form) and followed to its end through its events (GET /v1/videos/{id}/events), previews and all.

CPU (default): the small model at the default request, 256p 16:9 (320x192), 33 frames, 35 steps, served by a real
`python -m studio.engine` (the same command the studio starts). GPU (`--device cuda --tier 480p`): the
Wan2.1-1.3B-shaped random pipeline that benchmarks/harness/wan_model.py builds, loaded into the engine's VideoGenerator
(blocks compiled, warmed at the tier's size, CUDA graphs captured, its latent RGB map fitted at load), behind the
engine's own app served by uvicorn in this process.

    python benchmarks/cpu/preview_overhead.py                                  # CPU, the small model
    python benchmarks/cpu/preview_overhead.py --device cuda --tier 480p        # one GPU, Wan2.1-1.3B's shape
    python benchmarks/cpu/preview_overhead.py --url http://127.0.0.1:8000      # an engine that already runs

Reported: the median latency (POST to the finished record) and the median engine inference time of each, and their
ratio (on / off); the median of each round's own ratio (its two jobs ran back to back) and the fastest job of each
(on a shared machine, the ones its load left alone); for a local engine process, the CPU time it spent per job;
previews per job and their size. `--out FILE` writes every figure as JSON.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness.engine_http import TIMEOUT, engine_for, job_form, parse_args, sse_events
from benchmarks.harness.reports import machine, write_report
from studio.tiers import size_for


@dataclass
class JobTiming:
    previews_on: bool
    latency_s: float  # from sending the POST to receiving the finished record in the events
    inference_s: float  # the engine's own inference_time_s (denoise, decode, encode)
    previews: int  # preview events received
    preview_bytes: int  # their images, summed
    engine_cpu_s: float | None = None  # CPU time the engine's process spent meanwhile (a local engine process)


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU time of a process and all its threads so far (Linux' /proc), or None."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def run_job(http: httpx.Client, form: dict[str, str], previews_on: bool, pid: int | None = None) -> JobTiming:
    cpu_before = cpu_seconds(pid)
    sent = time.perf_counter()
    created = http.post("/v1/videos", files={k: (None, v) for k, v in form.items()})
    created.raise_for_status()
    job_id = created.json()["id"]
    count = size = 0
    record: dict[str, Any] = {}
    with http.stream("GET", f"/v1/videos/{job_id}/events") as response:
        for kind, data in sse_events(response):
            if kind == "preview":
                count += 1
                size += len(data["image"]) * 3 // 4  # base64 to bytes
            elif kind == "status":
                record = data
    latency = time.perf_counter() - sent
    cpu_after = cpu_seconds(pid)
    if record.get("status") != "completed":
        raise RuntimeError(f"job {job_id} ended {record.get('status')}: {record.get('error')}")
    cpu = cpu_after - cpu_before if cpu_after is not None and cpu_before is not None else None
    return JobTiming(previews_on, latency, float(record.get("inference_time_s") or 0.0), count, size, cpu)


def summary(timings: list[JobTiming]) -> dict[str, Any]:
    on = [t for t in timings if t.previews_on]
    off = [t for t in timings if not t.previews_on]
    latency_on, latency_off = (statistics.median(t.latency_s for t in group) for group in (on, off))
    inference_on, inference_off = (statistics.median(t.inference_s for t in group) for group in (on, off))
    # Each round's two jobs ran back to back: their ratio is least touched by the machine's load drifting. On a
    # shared machine the fastest jobs are the ones the load left alone, and CPU time is steadier than wall time.
    pairs = [a.latency_s / b.latency_s for a, b in zip(on, off, strict=False)]
    fastest_on, fastest_off = (min(t.latency_s for t in group) for group in (on, off))
    cpu = {}
    if all(t.engine_cpu_s is not None for t in timings):
        cpu_on, cpu_off = (statistics.median(t.engine_cpu_s or 0.0 for t in group) for group in (on, off))
        cpu = {
            "engine_cpu_on_s": round(cpu_on, 4),
            "engine_cpu_off_s": round(cpu_off, 4),
            "engine_cpu_ratio": round(cpu_on / cpu_off, 4) if cpu_off else None,
        }
    return {
        "jobs_each": len(on),
        "latency_ratio_of_pairs_median": round(statistics.median(pairs), 4),
        "latency_fastest_on_s": round(fastest_on, 4),
        "latency_fastest_off_s": round(fastest_off, 4),
        "latency_fastest_ratio": round(fastest_on / fastest_off, 4),
        **cpu,
        "latency_on_s": round(latency_on, 4),
        "latency_off_s": round(latency_off, 4),
        "latency_ratio": round(latency_on / latency_off, 4),
        "inference_on_s": round(inference_on, 4),
        "inference_off_s": round(inference_off, 4),
        "inference_ratio": round(inference_on / inference_off, 4) if inference_off else None,
        "previews_per_job": statistics.median(t.previews for t in on),
        "preview_kb_median": round(statistics.median(t.preview_bytes / max(1, t.previews) for t in on) / 1024, 2),
        "previews_when_off": sum(t.previews for t in off),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0])
    width, height = size_for(args.tier, "16:9")
    timings: list[JobTiming] = []
    with engine_for(args) as engine, httpx.Client(base_url=engine.url, headers=engine.headers, timeout=TIMEOUT) as http:
        for index in range(2):  # warm-up: one of each, not counted
            run_job(http, job_form(args, 900 + index, index == 0), index == 0, engine.pid)
        for round_ in range(args.rounds):
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for previews_on in order:
                timing = run_job(http, job_form(args, round_, previews_on), previews_on, engine.pid)
                timings.append(timing)
                print(
                    f"round {round_ + 1}/{args.rounds} previews {'on ' if previews_on else 'off'}: "
                    f"{timing.latency_s:.3f} s (inference {timing.inference_s:.3f} s, {timing.previews} previews)",
                    flush=True,
                )
        description = engine.description
    report = {
        "engine": description,
        "machine": machine(),
        "request": f"{width}x{height}, {args.frames} frames, {args.steps} steps, guidance {args.guidance}",
        "preview_interval_s": args.interval,
        **summary(timings),
        "jobs": [asdict(t) for t in timings],
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
