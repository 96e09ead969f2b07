"""Requests that lost touch with their job, and what becomes of each: followed to its end, sent again, or failed.

- Its server stopped answering after it accepted the job. Without auto-restart the request fails with the reason.
  With it, the request waits for the server to come back, then: the server still has the job → followed to its
  end; the job is gone and had never started → sent again; it had started → failed (a request never runs twice).
- An earlier studio left it at a server (its history row has a job id): followed up by that id, or failed as lost
  if that server is gone.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from studio.backend.clients.base import ClientError, RequestRejected, RequestTimings, ServerUnreachable
from studio.backend.clients.router import Endpoint, EndpointPool
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.store import OutputStore
from studio.backend.visitors import LOCAL_OPERATOR
from studio.protocol import JobRecord, JobStatus, VideoRequest

log = logging.getLogger(__name__)

# Without auto-restart, how long a request whose server stopped answering waits before it fails with "cannot
# reach": a managed server's exit watcher fails it sooner with the better reason (exit code, last log lines).
EXIT_WATCHER_GRACE_S = 1.0


@dataclass(frozen=True)
class Recovery:
    """What to do with a request that lost touch with its job: exactly one of follow, resend, failure."""

    follow: tuple[Endpoint, JobRecord] | None = None  # the server still has the job: poll it to its end
    resend: bool = False  # the job is gone and never started: send the request again
    failure: str | None = None  # settled: the request fails with this reason
    failure_prefix: str = ""  # put before the reason should following the job fail


async def after_loss(
    view: RequestView,
    endpoint: Endpoint,
    pool: EndpointPool,
    lost: ServerUnreachable,
    wait_for_restart: bool,
    restart_wait_s: float,
) -> Recovery:
    """The server at `endpoint` accepted this request's job, then stopped answering."""
    if endpoint.exited and view.never_started and pool.others_healthy(endpoint.url):
        # Its server died before starting it (a replica of a fleet): the job is gone, another replica makes it.
        return Recovery(resend=True)
    if not wait_for_restart:
        await asyncio.sleep(EXIT_WATCHER_GRACE_S)
        return Recovery(failure=str(lost))
    if await pool.wait_back([endpoint], timeout_s=restart_wait_s) is None:
        return Recovery(failure=f"{lost}; the server did not come back")
    assert view.job_id is not None
    try:
        record = await endpoint.client.retrieve(view.job_id)
    except RequestRejected as missing:
        if missing.status_code != 404:
            return Recovery(failure=f"{lost}; then: {missing}")
        if not view.never_started:
            return Recovery(failure=f"{lost}; its server restarted while it ran")
        return Recovery(resend=True)
    except ClientError as again:
        return Recovery(failure=f"{lost}; then: {again}")
    return Recovery(follow=(endpoint, record))


def follow_up(view: RequestView, pool: EndpointPool) -> Recovery:
    """A request an earlier studio left at a server: follow its job there, if that server is still in the pool."""
    endpoint = pool.find(view.endpoint or "")
    if endpoint is None:
        return Recovery(failure=f"lost: the server {view.endpoint} is gone")
    assert view.job_id is not None
    record = JobRecord(id=view.job_id, status=JobStatus.QUEUED)
    return Recovery(follow=(endpoint, record), failure_prefix="lost after a studio restart: ")


async def leftovers_to_follow(
    store: OutputStore,
    api_key: str | None = None,
    rows: list[dict[str, Any]] | None = None,
    **client_options: float,
) -> tuple[EndpointPool, list[dict[str, Any]]] | None:
    """Requests an earlier studio left at servers (history rows with a job id): those whose server still answers,
    with a pool of those servers, to be followed up; the others are marked lost in history, with the reason.
    `rows`: the leftovers as read when this studio started (default: read now), so that requests this studio
    has sent since are never taken for an earlier one's."""
    rows = store.resumable() if rows is None else rows
    if not rows:
        return None
    urls = sorted({row["endpoint"] for row in rows if row["endpoint"]})
    pool = EndpointPool.from_urls(urls, api_key=api_key, **client_options)
    await pool.check_health()
    alive = {ep.url for ep in pool.endpoints if ep.healthy}
    lost = [
        (row["id"], {"state": "lost", "error": f"the studio restarted and the server {row['endpoint']} is gone"})
        for row in rows
        if row["endpoint"] not in alive
    ]
    await asyncio.to_thread(store.finish_requests, lost)  # one transaction, off the event loop
    followed = [row for row in rows if row["endpoint"] in alive]
    log.info("following up %d requests of an earlier studio; %d lost", len(followed), len(rows) - len(followed))
    return pool, followed


def views_from_history(rows: list[dict[str, Any]]) -> list[RequestView]:
    """Requests an earlier studio left at a server, from their history rows: queued there, by job id."""
    views = []
    for row in rows:
        params = {k: v for k, v in (row["parameters"] or {}).items() if k != "input_reference"}
        views.append(
            RequestView(
                id=row["id"],
                run_id=row["run_id"],
                position=row["position"],
                request=VideoRequest(**params),
                state=RequestState.QUEUED,
                job_id=row["job_id"],
                endpoint=row["endpoint"],
                timings=RequestTimings(created=row["created_at"]),
                visitor_id=row.get("visitor") or LOCAL_OPERATOR.id,
            )
        )
    return views
