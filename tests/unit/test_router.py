"""The router's choice: least outstanding requests, ties to the first listed, unhealthy ones skipped; endpoints
added, retired and removed while requests come and go."""

import asyncio
import socket
import time

import pytest

from studio.backend.clients.router import Endpoint, EndpointPool, NoEndpointError
from tests.waiting import wait_for


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


def test_an_endpoint_added_takes_work_at_once_and_runs_holding_the_old_list_are_unaffected():
    pool = pool_of(1)
    first = pool.endpoints[0]
    first.outstanding = 2
    before = pool.endpoints
    added = pool.add("http://127.0.0.1:9100", http_timeout_s=5.0)
    assert pool.acquire() is added and pool.taking_work == 2
    assert before == [first]  # a new list: whoever went through the old one saw a whole pool
    with pytest.raises(ValueError, match="already in the pool"):
        pool.add(added.url)


def test_a_retired_endpoint_gets_no_new_work_even_when_it_answers_and_is_removed_once_drained():
    pool = pool_of(2)
    keep, leaving = pool.endpoints
    held = pool.acquire(exclude={keep.url})
    assert held is leaving
    pool.retire(leaving.url)
    assert pool.taking_work == 1 and not pool.others_healthy(keep.url)
    assert all(pool.acquire() is keep for _ in range(3))
    with pytest.raises(NoEndpointError):
        pool.acquire(exclude={keep.url})
    # A health probe that finds it answering does not bring it back: it is on its way out.
    asyncio.run(pool.check_health())
    assert not leaving.healthy and leaving.retiring
    with pytest.raises(ValueError, match="still has 1 requests outstanding"):
        pool.remove(leaving.url)
    pool.release(held, ok=True)
    assert pool.remove(leaving.url) is leaving and pool.endpoints == [keep]
    assert pool.find(leaving.url) is None


def test_the_last_endpoint_taking_work_is_not_retired_and_one_taking_work_is_not_removed():
    pool = pool_of(2)
    first, second = pool.endpoints
    with pytest.raises(ValueError, match="retire it first"):
        pool.remove(first.url)
    pool.retire(second.url)
    with pytest.raises(ValueError, match="last endpoint that takes work"):
        pool.retire(first.url)
    with pytest.raises(ValueError, match="not in the pool"):
        pool.retire("http://127.0.0.1:1")


def test_endpoints_added_and_removed_while_requests_come_and_go_on_other_threads():
    import threading

    pool = pool_of(1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def traffic() -> None:
        while not stop.is_set():
            try:
                endpoint = pool.acquire()
                pool.release(endpoint, ok=True)
            except BaseException as exc:  # any failure here is the test's failure
                errors.append(exc)
                return

    workers = [threading.Thread(target=traffic) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        for round_ in range(200):
            url = f"http://127.0.0.1:{9200 + round_}"
            pool.add(url)
            endpoint = pool.retire(url)
            wait_for(  # what it got before it was retired
                lambda endpoint=endpoint: not endpoint.outstanding,
                "the retired endpoint's requests to be released",
                10,
                poll_s=0,
            )
            pool.remove(url)
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
    assert not errors and len(pool.endpoints) == 1
    assert all(endpoint.outstanding == 0 for endpoint in pool.endpoints)
