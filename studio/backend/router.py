"""A pool of endpoints (replicas of one model) and the choice of where a request goes.

Each request goes to the endpoint with the fewest outstanding requests; ties go to the one listed first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from studio.backend.client import VideoClient


@dataclass(eq=False)
class Endpoint:
    url: str
    client: VideoClient
    outstanding: int = 0
    healthy: bool = True
    completed: int = 0
    failed: int = 0
    name: str = field(default="")

    def __post_init__(self) -> None:
        self.name = self.name or self.url


class NoEndpointError(RuntimeError):
    pass


class EndpointPool:
    def __init__(self, endpoints: list[Endpoint]):
        if not endpoints:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.endpoints = endpoints
        self._lock = threading.Lock()

    @classmethod
    def from_urls(cls, urls: list[str], api_key: str | None = None, **client_options: float) -> EndpointPool:
        return cls([Endpoint(url=url, client=VideoClient(url, api_key=api_key, **client_options)) for url in urls])

    def acquire(self) -> Endpoint:
        with self._lock:
            candidates = [ep for ep in self.endpoints if ep.healthy]
            if not candidates:
                raise NoEndpointError("no healthy server: " + ", ".join(ep.url for ep in self.endpoints))
            chosen = min(candidates, key=lambda ep: ep.outstanding)
            chosen.outstanding += 1
            return chosen

    def release(self, endpoint: Endpoint, ok: bool) -> None:
        with self._lock:
            endpoint.outstanding -= 1
            if ok:
                endpoint.completed += 1
            else:
                endpoint.failed += 1

    def find(self, url: str) -> Endpoint | None:
        return next((ep for ep in self.endpoints if ep.url == url), None)

    async def close(self) -> None:
        for endpoint in self.endpoints:
            await endpoint.client.close()
