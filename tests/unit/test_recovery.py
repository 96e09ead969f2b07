"""Requests an earlier studio left at servers: the ones whose server is gone are marked lost with the reason;
the others become queued requests followed by their job ids."""

import asyncio
import socket

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.recovery import follow_up, leftovers_to_follow, views_from_history
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.store import OutputStore
from studio.protocol import VideoRequest


def refused_url() -> str:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_leftovers_of_a_gone_server_are_marked_lost(tmp_path):
    store = OutputStore(tmp_path)
    gone = refused_url()
    store.add_run("run_1", {}, 0.0)
    request = VideoRequest(prompt="left behind", width=320, height=192, num_frames=33)
    store.add_request("req_1", "run_1", 0, 1.0, request.prompt, request.parameters())
    store.update_request("req_1", state="queued", job_id="video_1", endpoint=gone)

    leftovers = asyncio.run(leftovers_to_follow(store))
    assert leftovers is not None and leftovers[1] == []
    row = store.request_row("req_1")
    assert row["state"] == "lost" and gone in row["error"]
    assert asyncio.run(leftovers_to_follow(store)) is None  # nothing left to follow


def test_a_row_left_at_a_server_is_followed_by_its_job_id(tmp_path):
    store = OutputStore(tmp_path)
    request = VideoRequest(prompt="left behind", width=320, height=192, num_frames=33, seed=7)
    store.add_run("run_1", {}, 0.0)
    store.add_request("req_1", "run_1", 0, 1.0, request.prompt, request.parameters())
    store.update_request("req_1", state="running", job_id="video_1", endpoint="http://127.0.0.1:9000")
    (view,) = views_from_history(store.resumable())
    assert view.state is RequestState.QUEUED and view.job_id == "video_1" and view.request.seed == 7
    assert view.timings.created == 1.0

    followed = follow_up(view, EndpointPool.from_urls(["http://127.0.0.1:9000"]))
    assert followed.follow is not None and followed.follow[1].id == "video_1" and followed.failure is None
    elsewhere = follow_up(view, EndpointPool.from_urls(["http://127.0.0.1:9001"]))
    assert elsewhere.follow is None and elsewhere.failure == "lost: the server http://127.0.0.1:9000 is gone"


def test_history_of_an_older_studio_gains_visitors_in_place_and_its_runs_are_the_local_operators(tmp_path):
    import sqlite3

    from studio.backend.runs.store import SCHEMA

    with sqlite3.connect(tmp_path / "history.sqlite3") as old:  # a database from before visitors
        old.executescript(SCHEMA)
        old.execute("INSERT INTO runs (id, created_at, spec) VALUES ('run_old', 0.0, '{}')")
    store = OutputStore(tmp_path)
    store.add_run("run_new", {}, 1.0, visitor_id="alice")
    request = VideoRequest(prompt="left behind", width=320, height=192, num_frames=33)
    for request_id, run_id, state in [("req_1", "run_old", "running"), ("req_2", "run_new", "cancelled")]:
        store.add_request(request_id, run_id, 0, 1.0, request.prompt, request.parameters())
        store.update_request(request_id, state=state, job_id="video_1", endpoint="http://127.0.0.1:9000")
    assert [run["id"] for run in store.recent_runs()] == ["run_new", "run_old"]  # None: everyone's
    assert [run["id"] for run in store.recent_runs(visitor_id="local")] == ["run_old"]
    assert store.recent_runs(visitor_id="alice")[0]["cancelled"] == 1  # History counts cancelled requests
    assert store.run_requests("run_new", visitor_id="local") == []  # not theirs: nothing
    assert [row["id"] for row in store.run_requests("run_new", visitor_id="alice")] == ["req_2"]
    (view,) = views_from_history(store.resumable())
    assert view.visitor_id == "local"
