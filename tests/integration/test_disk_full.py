"""The outputs disk fills up: the request fails with a clear reason, history says so, the server runs on."""

from __future__ import annotations

import asyncio
import shutil

import httpx

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore


def test_disk_full_fails_the_request_clearly(wan_engine, small_disk):
    engine = wan_engine  # its noise videos never fit in what is left
    store = OutputStore(small_disk / "outputs")
    # Fill the disk but for 48 kB: room for history updates, not for a video.
    free = shutil.disk_usage(small_disk).free
    (small_disk / "filler").write_bytes(b"\0" * max(0, free - 48 * 1024))
    pool = EndpointPool.from_urls([engine.base_url], poll_interval_s=0.05)

    async def main():
        run = Run(RunSpec(prompts=["too big for the disk"], tier="256p", frames=33, steps=2), pool, store)
        await run.wait()
        await pool.close()
        return run.views[0]

    view = asyncio.run(main())
    assert view.state is RequestState.FAILED and "No space left on device" in view.error
    assert store.request_row(view.id)["state"] == "failed"
    assert list(small_disk.glob("outputs/videos/*/*.part")) == []
    assert httpx.get(engine.base_url + "/health").json() == {"status": "healthy"}
