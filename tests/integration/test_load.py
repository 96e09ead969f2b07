"""Many requests at once against the embedded engine: none lost, none duplicated, all in history.

(Its speed, memory and event-loop lag are measured by benchmarks/cpu/load.py, not here.)
"""

from __future__ import annotations

import asyncio

import pytest

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore

pytestmark = pytest.mark.timeout(900)


def test_256_requests_at_concurrency_64_are_all_accounted_for(engine, tmp_path):
    store = OutputStore(tmp_path / "outputs")
    pool = EndpointPool.from_urls([engine.base_url], poll_interval_s=0.25)
    spec = RunSpec(
        prompts=[f"load {i}" for i in range(256)], tier="256p", aspect="1:1", frames=5, steps=1, concurrency=64
    )

    async def main():
        run = Run(spec, pool, store)
        await run.wait()
        await pool.close()
        return run

    run = asyncio.run(main())
    assert [v.state for v in run.views] == [RequestState.DONE] * 256
    assert len({v.job_id for v in run.views}) == 256
    assert len({v.video_path for v in run.views}) == 256 and all(v.video_path.is_file() for v in run.views)
    rows = store.run_requests(run.id)
    assert [row["id"] for row in rows] == [v.id for v in run.views]
    assert all(row["state"] == "done" for row in rows)
