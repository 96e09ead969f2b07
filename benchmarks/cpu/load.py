"""Load: N requests at concurrency C against the embedded engine at its fastest settings.

Checks that none is lost or duplicated and that every one is in history, and measures the studio's
memory (RSS before and after) and its event loop's lag (a 10 ms ticker's overshoot, p50/p99/max).

Usage: python benchmarks/cpu/load.py [--requests 256] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness.stats import LoopWatch, percentile
from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.launchers import embedded_launch
from studio.backend.servers.supervisor import ManagedServer
from studio.config import StudioSettings


async def run_load(url: str, store: OutputStore, requests: int, concurrency: int) -> tuple[Run, list[float], float]:
    pool = EndpointPool.from_urls([url], poll_interval_s=0.25)
    spec = RunSpec(
        prompts=[f"load {i}" for i in range(requests)],
        tier="256p",
        aspect="1:1",
        frames=5,
        steps=1,
        concurrency=concurrency,
    )
    run = Run(spec, pool, store)
    watch = LoopWatch(tick_s=0.01)
    watch.start()
    started = time.perf_counter()
    await run.wait()
    elapsed = time.perf_counter() - started
    await watch.stop()
    await pool.close()
    return run, watch.lags, elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    me = psutil.Process()
    with tempfile.TemporaryDirectory() as tmp:
        settings = StudioSettings(_env_file=None)
        server = ManagedServer(lambda port: embedded_launch(settings, port, output_dir=Path(tmp) / "engine"))
        server.start()
        store = OutputStore(Path(tmp) / "outputs")
        try:
            rss_before = me.memory_info().rss
            run, lags, elapsed = asyncio.run(run_load(server.base_url, store, args.requests, args.concurrency))
            rss_after = me.memory_info().rss
            rows = store.run_requests(run.id)
        finally:
            server.stop()
            store.close()
    states = [v.state for v in run.views]
    job_ids = [v.job_id for v in run.views]
    print(
        f"{args.requests} requests at concurrency {args.concurrency} in {elapsed:.1f} s: "
        f"{states.count(RequestState.DONE)} done, {len(states) - states.count(RequestState.DONE)} not done; "
        f"{len(set(job_ids))} distinct job ids; {len(rows)} history rows, "
        f"{sum(r['state'] == 'done' for r in rows)} done"
    )
    print(f"studio RSS: {rss_before / 2**20:.0f} MiB before, {rss_after / 2**20:.0f} MiB after")
    print(
        f"event loop lag: p50 {statistics.median(lags) * 1000:.1f} ms, p99 {(percentile(lags, 99) or 0.0) * 1000:.1f} ms, "
        f"max {max(lags) * 1000:.1f} ms ({len(lags)} ticks)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
