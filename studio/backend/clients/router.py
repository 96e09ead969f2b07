"""A pool of endpoints (replicas of one model) and the choice of where a request goes.

Each request goes to the endpoint with the fewest outstanding requests; ties go to the one listed first.
Endpoints come and go while runs use the pool (a fleet that scales): one is added once its server answers, and
one is retired (no new work, whatever its health says) before it is removed, once nothing is outstanding there.
The list is replaced, never changed in place, so whoever goes through it meanwhile sees a whole one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_delay, wait_fixed

from studio.backend.clients.http import sync_client
from studio.backend.clients.vllm_omni import VideoClient


@dataclass(eq=False)
class Endpoint:
    url: str
    client: VideoClient
    outstanding: int = 0
    healthy: bool = True
    completed: int = 0
    failed: int = 0
    restarting: bool = False  # a managed server on its way back after a crash: worth waiting for
    exited: bool = False  # its process is known to have died: the jobs it held are gone with it
    retiring: bool = False  # on its way out of the pool: no new work goes there, even while it answers
    name: str = field(default="")

    def __post_init__(self) -> None:
        self.name = self.name or self.url


class NoEndpointError(RuntimeError):
    pass


class _Absent(Enum):
    """Why an endpoint waited for is not back yet."""

    RESTARTING = "restarting"
    SILENT = "silent"  # not restarting, and not answering its health check


class _Moved(Enum):
    """The pool waited on was handed over to another (its fleet was started anew): wait no more here."""

    HANDED_OVER = "handed over"


log = logging.getLogger(__name__)


class EndpointPool:
    def __init__(self, endpoints: list[Endpoint], api_key: str | None = None):
        if not endpoints:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.endpoints = endpoints
        self.api_key = api_key
        self.client_class: type[VideoClient] = VideoClient  # what replace_url makes for a moved endpoint
        # The pool that took over from this one, where its fleet was started anew (an operator's restart with new
        # settings makes new servers, on new ports): requests not yet at a server go there, not to these endpoints.
        self.successor: EndpointPool | None = None
        self._lock = threading.Lock()
        # One health watcher per event loop, however many runs want the pool watched.
        self._watchers: dict[asyncio.AbstractEventLoop, tuple[asyncio.Task, int]] = {}

    @classmethod
    def from_urls(
        cls,
        urls: list[str],
        api_key: str | None = None,
        client_class: type[VideoClient] = VideoClient,
        **client_options: float,
    ) -> EndpointPool:
        """A pool of `urls`, each spoken to by a `client_class` (the engine's: studio.backend.engine_kinds)."""
        endpoints = [Endpoint(url=url, client=client_class(url, api_key=api_key, **client_options)) for url in urls]
        pool = cls(endpoints, api_key=api_key)
        pool.client_class = client_class
        return pool

    def hand_over(self, successor: EndpointPool) -> None:
        """`successor` serves from now on: whoever waits on this pool stops waiting, and goes there."""
        if successor is not self:
            self.successor = successor

    def latest(self) -> EndpointPool:
        """The pool that serves now: this one, or the last of those it was handed over to."""
        pool = self
        while pool.successor is not None:
            pool = pool.successor
        return pool

    def acquire(self, exclude: set[str] | None = None) -> Endpoint:
        with self._lock:
            candidates = [
                ep for ep in self.endpoints if ep.healthy and not ep.retiring and ep.url not in (exclude or set())
            ]
            if not candidates:
                raise NoEndpointError("no healthy server: " + ", ".join(ep.url for ep in self.endpoints))
            chosen = min(candidates, key=lambda ep: ep.outstanding)
            chosen.outstanding += 1
            return chosen

    def hold(self, endpoint: Endpoint) -> None:
        """Count a request on a given endpoint (one followed there, not chosen by acquire)."""
        with self._lock:
            endpoint.outstanding += 1

    def release(self, endpoint: Endpoint, ok: bool) -> None:
        with self._lock:
            endpoint.outstanding -= 1
            if ok:
                endpoint.completed += 1
            else:
                endpoint.failed += 1

    def mark_down(self, endpoint: Endpoint, reason: str) -> None:
        if endpoint.healthy:
            log.warning("endpoint %s is down: %s", endpoint.url, reason)
        endpoint.healthy = False

    @property
    def restarting(self) -> bool:
        return any(ep.restarting for ep in self.endpoints)

    def mark_restarting(self, url: str) -> None:
        """The server behind `url` crashed and is being restarted: requests wait for it instead of failing."""
        endpoint = self.find(url)
        if endpoint is not None:
            endpoint.healthy, endpoint.restarting = False, True

    def mark_restarted(self, url: str, ok: bool) -> None:
        endpoint = self.find(url)
        if endpoint is not None:
            endpoint.healthy, endpoint.restarting = ok, False
            endpoint.exited = endpoint.exited and not ok

    def mark_exited(self, url: str) -> None:
        """The managed server behind `url` died (its exit watcher says so): no work goes there until it is back."""
        endpoint = self.find(url)
        if endpoint is not None:
            endpoint.healthy, endpoint.exited = False, True

    def others_healthy(self, url: str) -> bool:
        """Another endpoint than `url` takes work now."""
        return any(ep.healthy and not ep.retiring for ep in self.endpoints if ep.url != url)

    @property
    def taking_work(self) -> int:
        """Endpoints not on their way out: what the studio's in-flight slots are counted for."""
        return sum(1 for ep in self.endpoints if not ep.retiring)

    # ---- endpoints that come and go ----------------------------------------------------------------
    def add(self, url: str, api_key: str | None = None, **client_options: float) -> Endpoint:
        """A new server (a replica the fleet added) takes work from now on."""
        with self._lock:
            if any(ep.url == url for ep in self.endpoints):
                raise ValueError(f"{url} is already in the pool")
            endpoint = Endpoint(url=url, client=self.client_class(url, api_key=api_key, **client_options))
            self.endpoints = [*self.endpoints, endpoint]
        log.info("endpoint %s added", url)
        return endpoint

    def retire(self, url: str) -> Endpoint:
        """No new work goes to `url` from now on; what it has outstanding finishes there. Raises ValueError where
        it is not in the pool, or where no other endpoint would be left to take work."""
        with self._lock:
            endpoint = self._find_locked(url)
            if not any(ep is not endpoint and not ep.retiring for ep in self.endpoints):
                raise ValueError(f"{url} is the last endpoint that takes work: it stays")
            endpoint.retiring, endpoint.healthy = True, False
        return endpoint

    def remove(self, url: str) -> Endpoint:
        """Take a retired endpoint out of the pool, once nothing is outstanding there. Raises ValueError where it
        is not retired first, or still has requests (they would be released on an endpoint no longer listed)."""
        with self._lock:
            endpoint = self._find_locked(url)
            if not endpoint.retiring:
                raise ValueError(f"{url} takes work: retire it first")
            if endpoint.outstanding:
                raise ValueError(f"{url} still has {endpoint.outstanding} requests outstanding")
            self.endpoints = [ep for ep in self.endpoints if ep is not endpoint]
        log.info("endpoint %s removed", url)
        return endpoint

    def _find_locked(self, url: str) -> Endpoint:
        endpoint = next((ep for ep in self.endpoints if ep.url == url), None)
        if endpoint is None:
            raise ValueError(f"{url} is not in the pool")
        return endpoint

    async def wait_back(
        self, endpoints: list[Endpoint] | None = None, timeout_s: float = 1800.0, grace_s: float = 5.0
    ) -> Endpoint | None:
        """Wait for one of `endpoints` (default: all) to take work again, through a restart if one is under way.
        An endpoint that is neither restarting nor answering its health check after `grace_s` (the moment a
        server's exit watcher needs to notice a crash) is given up on. Returns the endpoint back, or None."""
        watched = endpoints or self.endpoints

        async def back() -> Endpoint | _Absent | _Moved:
            if self.successor is not None:
                return _Moved.HANDED_OVER  # the caller asks latest() for the pool that serves now
            if any(ep.restarting for ep in watched):
                return _Absent.RESTARTING  # nothing to ask: the restart says when it is over
            for endpoint in watched:
                if endpoint.retiring:  # answers, but takes no work
                    continue
                if endpoint.healthy or await endpoint.client.healthy(timeout_s=2.0):
                    endpoint.healthy = True
                    return endpoint
            return _Absent.SILENT

        def given_up(poll: RetryCallState) -> bool:
            assert poll.outcome is not None and poll.seconds_since_start is not None
            silent = not poll.outcome.failed and poll.outcome.result() is _Absent.SILENT
            return silent and poll.seconds_since_start > grace_s

        waiting = AsyncRetrying(
            retry=retry_if_result(lambda found: isinstance(found, _Absent)),
            wait=wait_fixed(0.25),
            stop=stop_after_delay(timeout_s) | given_up,
            retry_error_callback=lambda _: None,
        )
        found = await waiting(back)
        return found if isinstance(found, Endpoint) else None

    async def check_health(self) -> None:
        """Probe every endpoint's /health: a failing one is skipped, a recovered one comes back. One being
        restarted is left to its restart, which says when it is back; one being retired stays out."""
        probed = [ep for ep in self.endpoints if not ep.restarting and not ep.retiring]
        results = await asyncio.gather(*(ep.client.healthy() for ep in probed))
        for endpoint, healthy in zip(probed, results, strict=True):
            if healthy and not endpoint.healthy:
                log.info("endpoint %s is back", endpoint.url)
            elif endpoint.healthy and not healthy:
                log.warning("endpoint %s does not answer its health check", endpoint.url)
            endpoint.healthy = healthy
            if healthy:
                endpoint.exited = False

    async def watch_health(self, interval_s: float = 2.0) -> None:
        """Run until cancelled."""
        while True:
            await self.check_health()
            await asyncio.sleep(interval_s)

    @asynccontextmanager
    async def health_watched(self, interval_s: float = 2.0) -> AsyncIterator[None]:
        """While the block runs, every endpoint's health is probed (a pool of one too: a single server that went
        down comes back once it answers again). Blocks of one event loop share one watcher."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task, users = self._watchers.get(loop, (None, 0))
            if task is None or task.done():
                task = loop.create_task(self.watch_health(interval_s), name="health-watch")
            self._watchers[loop] = (task, users + 1)
        try:
            yield
        finally:
            with self._lock:
                task, users = self._watchers[loop]
                if users > 1:
                    self._watchers[loop] = (task, users - 1)
                else:
                    del self._watchers[loop]
                    task.cancel()

    def served_models(self, timeout_s: float = 5.0) -> list[str]:
        """The models the servers say they serve (GET /v1/models), each once, in the endpoints' order; a server
        that does not answer adds none."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        models: list[str] = []
        with sync_client(timeout_s) as http:
            for endpoint in self.endpoints:
                try:
                    response = http.get(endpoint.client.base_url + "/models", headers=headers)
                    response.raise_for_status()
                    body = response.json()  # vLLM-Omni: {"data": [{"id": ...}]}; the Cosmos Framework's: names
                    names = (
                        [str(name) for name in body]
                        if isinstance(body, list)
                        else [str(model["id"]) for model in body.get("data", [])]
                    )
                except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    log.warning("could not read the models %s serves: %s", endpoint.url, exc)
                    continue
                models.extend(name for name in names if name not in models)
        return models

    def replace_url(self, old: str, new: str, api_key: str | None = None, **client_options: float) -> None:
        """A managed server came back on another address: its endpoint follows it."""
        endpoint = self.find(old)
        if endpoint is not None:
            endpoint.url, endpoint.name = new, new
            endpoint.client = self.client_class(new, api_key=api_key, **client_options)

    def find(self, url: str) -> Endpoint | None:
        return next((ep for ep in self.endpoints if ep.url == url), None)

    async def close(self) -> None:
        for endpoint in self.endpoints:
            await endpoint.client.close()
