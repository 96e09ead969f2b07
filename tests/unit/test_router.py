"""The router's choice: least outstanding requests, ties to the first listed, unhealthy ones skipped."""

import asyncio
import socket
import time

import pytest

from studio.backend.router import Endpoint, EndpointPool, NoEndpointError


def pool_of(count: int) -> EndpointPool:
    # Clients are built but never used here: no request is sent.
    return EndpointPool.from_urls([f"http://127.0.0.1:{9000 + i}" for i in range(count)])


def test_least_outstanding_under_uneven_load():
    pool = pool_of(3)
    a, b, c = pool.endpoints
    a.outstanding, b.outstanding, c.outstanding = 5, 1, 3
    assert pool.acquire() is b and b.outstanding == 2
    assert pool.acquire() is b and b.outstanding == 3
    assert pool.acquire() is b  # ties (3, 3) go to the first listed among the least loaded: b before c
    chosen = [pool.acquire().url for _ in range(6)]
    assert [ep.outstanding for ep in pool.endpoints] == [6, 6, 6]
    assert chosen == [c.url, b.url, c.url, a.url, b.url, c.url]


def test_release_counts_results_and_unhealthy_endpoints_are_skipped():
    pool = pool_of(2)
    first = pool.acquire()
    pool.release(first, ok=True)
    assert first.outstanding == 0 and first.completed == 1
    pool.mark_down(first, "connection refused")
    assert all(pool.acquire() is pool.endpoints[1] for _ in range(3))
    with pytest.raises(NoEndpointError):
        pool.acquire(exclude={pool.endpoints[1].url})
    pool.endpoints[1].healthy = False
    with pytest.raises(NoEndpointError, match="no healthy server"):
        pool.acquire()


def test_wait_back_waits_through_a_restart_and_gives_up_on_a_silent_endpoint():
    with socket.socket() as probe:  # a port nobody listens on: health checks are refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = EndpointPool.from_urls([f"http://127.0.0.1:{port}"])
    endpoint = pool.endpoints[0]

    async def main() -> tuple[float, Endpoint | None, float]:
        pool.mark_down(endpoint, "connection refused")
        started = time.monotonic()
        assert await pool.wait_back(grace_s=0.3) is None
        silent_s = time.monotonic() - started
        pool.mark_restarting(endpoint.url)
        asyncio.get_running_loop().call_later(1.0, pool.mark_restarted, endpoint.url, True)
        started = time.monotonic()
        back = await pool.wait_back(grace_s=0.3)  # restarting: waited for past the grace
        return silent_s, back, time.monotonic() - started

    silent_s, back, restart_s = asyncio.run(main())
    assert 0.3 <= silent_s < 5.0
    assert back is endpoint and endpoint.healthy and restart_s >= 1.0
