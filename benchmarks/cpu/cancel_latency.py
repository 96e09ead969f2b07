"""Cancel to stopped: how soon a DELETE stops a running job of the embedded engine, in seconds and in denoising steps.

Each round sends a job, follows its events (GET /v1/videos/{id}/events) and, once the job has reported step `--at`
(default: a third of its steps), sends DELETE from another thread. The stream then ends with the job's record,
failed with code 499. From the DELETE's send, it measures: the seconds to that cancelled record, and to the DELETE's
answer (200 once the loop has stopped); the steps the job reported after the DELETE was sent (the loop looks at its
cancel after every step: 0 or 1, or one more where an event was still on its way when the DELETE left); and the
seconds to the record in steps (over the job's median step time).

The engines are those of preview_overhead.py (benchmarks/harness/engine_http.py): on a CPU the small model served
by `python -m studio.engine`; with `--device cuda --tier 480p` the Wan2.1-1.3B-shaped random pipeline
(benchmarks/harness/wan_model.py) in the engine's own app.

    python benchmarks/cpu/cancel_latency.py                              # CPU, the small model, 256p 16:9
    python benchmarks/cpu/cancel_latency.py --device cuda --tier 480p    # one GPU, Wan2.1-1.3B's shape
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness.engine_http import engine_for, job_form, parse_args, sse_events
from benchmarks.harness.reports import machine, write_report
from studio.tiers import size_for


@dataclass
class CancelTiming:
    step_at_delete: int  # the latest step the client had seen when it sent the DELETE
    last_step: int  # the last step the job reported
    record_s: float  # from sending the DELETE to the cancelled record in the events
    answer_s: float  # from sending the DELETE to its answer
    answer_status: int
    step_s: float  # the job's median step time before the DELETE

    @property
    def steps_after(self) -> int:
        return self.last_step - self.step_at_delete

    @property
    def record_in_steps(self) -> float:
        return self.record_s / self.step_s if self.step_s else float("nan")


def cancel_one(http: httpx.Client, deleter_http: httpx.Client, form: dict[str, str], at: int) -> CancelTiming:
    """`deleter_http`: a client of its own for the DELETE, made beforehand (making one costs milliseconds)."""
    created = http.post("/v1/videos", files={k: (None, v) for k, v in form.items()})
    created.raise_for_status()
    job_id = created.json()["id"]
    sent_at: float | None = None
    step_at_delete = last_step = 0
    step_times: list[float] = []
    answer: dict[str, float] = {}
    record: dict = {}
    record_at = 0.0

    def delete() -> None:
        response = deleter_http.delete(f"/v1/videos/{job_id}")
        answer.update(at=time.perf_counter(), status=response.status_code)

    deleter = threading.Thread(target=delete)
    with http.stream("GET", f"/v1/videos/{job_id}/events") as response:
        for kind, data in sse_events(response):
            if kind == "progress":
                last_step = data["step"]
                if sent_at is None:
                    if data.get("step_s") is not None:
                        step_times.append(data["step_s"])
                    if last_step >= at:
                        step_at_delete, sent_at = last_step, time.perf_counter()
                        deleter.start()
            elif kind == "status":
                record, record_at = data, time.perf_counter()
    deleter.join(60)
    if sent_at is None or record.get("status") != "failed" or (record.get("error") or {}).get("code") != 499:
        raise RuntimeError(f"job {job_id} was not cancelled: {record.get('status')} {record.get('error')}")
    return CancelTiming(
        step_at_delete=step_at_delete,
        last_step=last_step,
        record_s=record_at - sent_at,
        answer_s=answer["at"] - sent_at,
        answer_status=int(answer["status"]),
        step_s=statistics.median(step_times) if step_times else 0.0,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0])
    at = max(2, args.steps // 3)
    width, height = size_for(args.tier, "16:9")
    timings: list[CancelTiming] = []
    with (
        engine_for(args) as engine,
        httpx.Client(base_url=engine.url, headers=engine.headers, timeout=600) as http,
        httpx.Client(base_url=engine.url, headers=engine.headers, timeout=60) as deleter_http,
    ):
        for index in range(args.rounds + 1):  # the first is a warm-up, not counted
            timing = cancel_one(http, deleter_http, job_form(args, index, True), at)
            if index == 0:
                continue
            timings.append(timing)
            print(
                f"round {index}/{args.rounds}: DELETE at step {timing.step_at_delete}, last step {timing.last_step}, "
                f"record after {timing.record_s * 1000:.0f} ms ({timing.record_in_steps:.2f} steps), "
                f"answer {timing.answer_status} after {timing.answer_s * 1000:.0f} ms",
                flush=True,
            )
        description = engine.description
    report = {
        "engine": description,
        "machine": machine(),
        "request": f"{width}x{height}, {args.frames} frames, {args.steps} steps, guidance {args.guidance}",
        "delete_at_step": at,
        "rounds": len(timings),
        "steps_after_delete_max": max(t.steps_after for t in timings),
        "steps_after_delete_median": statistics.median(t.steps_after for t in timings),
        "record_s_median": round(statistics.median(t.record_s for t in timings), 4),
        "record_s_max": round(max(t.record_s for t in timings), 4),
        "record_in_steps_median": round(statistics.median(t.record_in_steps for t in timings), 3),
        "record_in_steps_max": round(max(t.record_in_steps for t in timings), 3),
        "answer_s_median": round(statistics.median(t.answer_s for t in timings), 4),
        "step_s_median": round(statistics.median(t.step_s for t in timings), 4),
        "answers": sorted({t.answer_status for t in timings}),
        "jobs": [asdict(t) for t in timings],
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
