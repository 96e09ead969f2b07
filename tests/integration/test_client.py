"""The studio's client and runner against a started engine."""

from __future__ import annotations

import asyncio
import time

import pytest

from studio.backend.clients.base import RequestRejected
from studio.backend.clients.router import EndpointPool
from studio.backend.clients.vllm_omni import VideoClient
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.media import probe_mp4
from studio.protocol import JobStatus, VideoRequest
from tests.waiting import wait_for_async


def request(**values) -> VideoRequest:
    base = {
        "prompt": "a red circle",
        "width": 64,
        "height": 64,
        "num_frames": 5,
        "num_inference_steps": 2,
        "seed": 1,
    }
    return VideoRequest(**{**base, **values})


def test_three_concurrent_jobs_decode_with_requested_shape(engine, tmp_path):
    shapes = [(320, 192, 9), (192, 320, 5), (256, 256, 13)]

    async def main():
        async with VideoClient(engine.base_url, poll_interval_s=0.05) as client:
            return await asyncio.gather(
                *(
                    client.run(request(width=w, height=h, num_frames=f, prompt=f"job {i}"), tmp_path / f"{i}.mp4")
                    for i, (w, h, f) in enumerate(shapes)
                )
            )

    outcomes = asyncio.run(main())
    for (width, height, frames), outcome in zip(shapes, outcomes, strict=True):
        assert outcome.ok, outcome.record.error
        info = probe_mp4(outcome.video_path)
        assert (info.width, info.height, info.num_frames) == (width, height, frames)
        t = outcome.timings
        assert t.created <= t.sent <= t.accepted <= t.completed <= t.downloaded
        assert 0 < t.inference_s <= t.server_s
    # One job at a time at the server: the three inference windows do not overlap much, so the later
    # jobs waited in the queue.
    waits = sorted(outcome.timings.queue_wait_s for outcome in outcomes)
    assert waits[-1] > 0.5 * min(outcome.timings.inference_s for outcome in outcomes)


def test_progress_rises_and_cancel_frees_the_engine(engine, tmp_path):
    async def main():
        seen: list[float] = []
        async with VideoClient(engine.base_url, poll_interval_s=0.05) as client:
            long_job = request(width=320, height=192, num_frames=33, num_inference_steps=200)

            def track(record):
                if record.status is JobStatus.IN_PROGRESS:
                    seen.append(record.progress)

            task = asyncio.create_task(client.run(long_job, tmp_path / "long.mp4", on_update=track))
            await wait_for_async(
                lambda: len({p for p in seen if p > 0}) >= 3,
                "three different progress values of the long job",
                120,
                detail=lambda: f"progress seen {seen}, the job's task done: {task.done()}",
            )
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            started = time.monotonic()
            outcome = await client.run(request(), tmp_path / "next.mp4")
            return seen, outcome, time.monotonic() - started

    seen, outcome, next_job_s = asyncio.run(main())
    rising = [p for p in seen if p > 0]
    assert rising == sorted(rising) and rising[-1] > rising[0] and rising[-1] < 100
    assert outcome.ok
    assert next_job_s < 20  # the cancelled 200-step job is not still holding the worker


def test_run_saves_before_reporting_and_records_history(engine, tmp_path):
    store = OutputStore(tmp_path / "outputs")
    pool = EndpointPool.from_urls([engine.base_url], poll_interval_s=0.05)
    spec = RunSpec(
        prompts=["a red circle", "a blue square"],
        tier="256p",
        aspect="1:1",
        frames=5,
        steps=2,
        copies=2,
        concurrency=4,
        seed=10,
        seed_policy="increment",
    )

    async def main():
        run = Run(spec, pool, store)
        done_views = []
        async for view in run.updates():
            if view.state is RequestState.DONE:
                # Shown only once the mp4 and its sidecar are on disk and history says done.
                assert view.video_path.is_file() and view.sidecar_path.is_file()
                assert store.request_row(view.id)["state"] == "done"
                done_views.append(view.id)
        await pool.close()
        return run, done_views

    run, done_views = asyncio.run(main())
    assert len(set(done_views)) == 4
    assert [v.request.seed for v in run.views] == [10, 11, 12, 13]
    rows = store.run_requests(run.id)
    assert [row["state"] for row in rows] == ["done"] * 4
    assert all(row["timings"]["latency_s"] > 0 for row in rows)


def test_guardrail_block_reads_as_such(engine, tmp_path):
    store = OutputStore(tmp_path / "outputs")
    pool = EndpointPool.from_urls([engine.base_url], poll_interval_s=0.05)
    spec = RunSpec(prompts=["gore and more gore"], tier="256p", aspect="1:1", frames=5, steps=2)

    async def main():
        run = Run(spec, pool, store)
        await run.wait()
        await pool.close()
        return run.views[0]

    view = asyncio.run(main())
    assert view.state is RequestState.FAILED and view.guardrail_blocked
    assert "guardrail" in view.error and "400" in view.error


def test_poll_when_done_aims_at_the_expected_end_within_bounds():
    from studio.backend.clients.vllm_omni import MIN_POLL_S, poll_when_done

    # 40% in 2 s: 60% more takes 3 s; the interval caps it, MIN_POLL_S floors it.
    assert poll_when_done((10.0, 0.0), 12.0, 40.0, 5.0) == pytest.approx(3.0)
    assert poll_when_done((10.0, 0.0), 12.0, 40.0, 1.0) == 1.0
    assert poll_when_done((10.0, 0.0), 12.0, 99.99, 1.0) == MIN_POLL_S
    assert poll_when_done((10.0, 20.0), 12.0, 20.0, 1.0) == 1.0  # no movement: no estimate


def test_a_running_job_is_seen_done_soon_after_it_ends_despite_a_long_interval(engine, tmp_path):
    """With polls 3 s apart a job of a few seconds would be seen done 1.5 s late on average; the client polls
    again when the job's progress says it should be done."""
    interval = 3.0

    async def main():
        async with VideoClient(engine.base_url, poll_interval_s=interval) as client:
            outcome = await client.run(
                request(width=448, height=256, num_frames=9, num_inference_steps=200), tmp_path / "v.mp4"
            )
        return outcome

    outcome = asyncio.run(main())
    assert outcome.record.status is JobStatus.COMPLETED
    t = outcome.timings
    late = (t.completed - t.accepted) - outcome.record.inference_time_s
    assert late < 0.8 * interval / 2, f"seen done {late:.2f} s after the server finished"


def test_rejections_carry_the_servers_own_message(engine, tmp_path):
    async def main():
        async with VideoClient(engine.base_url) as client:
            with pytest.raises(RequestRejected) as mismatch:
                await client.create(request(model="another-model"))
            with pytest.raises(RequestRejected) as unknown:
                await client.download("video_gen_nope", tmp_path / "nope.mp4")
            return mismatch.value, unknown.value, await client.cancel("video_gen_nope")

    mismatch, unknown, cancelled = asyncio.run(main())
    assert mismatch.status_code == 400 and str(mismatch).startswith("HTTP 400: Model mismatch: request specifies")
    assert unknown.status_code == 404 and str(unknown) == "Video not found"
    assert cancelled is False and not (tmp_path / "nope.mp4.part").exists()


def test_an_idle_server_shows_no_queue_wait_and_its_own_inference_time(engine, tmp_path):
    """The first poll comes a poll interval after sending: the job's start is not read from it, so a job that left
    the queue at once shows no queue wait, and the server's own inference time stands."""
    interval = 0.25

    async def main():
        async with VideoClient(engine.base_url, poll_interval_s=interval) as client:
            return await client.run(request(num_frames=9, num_inference_steps=30), tmp_path / "v.mp4")

    outcome = asyncio.run(main())
    t = outcome.timings
    assert outcome.record.status is JobStatus.COMPLETED
    assert t.queue_wait_s < interval / 2, t.as_dict()
    assert t.inference_s == pytest.approx(outcome.record.inference_time_s)
    assert t.queue_wait_s <= t.queue_wait_max_s and t.queue_wait_s + t.inference_s <= t.server_s + 1e-6
    figures = t.as_dict()
    assert "lower bound" in figures["bounds"] and figures["queue_wait_max_s"] is not None


def test_the_client_follows_the_engines_events_and_counts_its_steps(engine, tmp_path):
    """The embedded engine offers a job's events: the client follows them (no polling), each step reaches the
    request, and its timings are bounded as by polling."""
    store = OutputStore(tmp_path / "outputs")
    pool = EndpointPool.from_urls([engine.base_url], poll_interval_s=30.0)  # a poll would take 30 s: none happens
    spec = RunSpec(prompts=["a red circle moving left"], tier="256p", aspect="1:1", frames=5, steps=7, concurrency=1)

    async def main():
        run = Run(spec, pool, store)
        steps = []
        async for view in run.updates():
            if view.step is not None and (not steps or steps[-1] != view.step):
                steps.append(view.step)
        await pool.close()
        return run, steps

    started = time.monotonic()
    run, steps = asyncio.run(main())
    (view,) = run.views
    assert view.state is RequestState.DONE and time.monotonic() - started < 30
    assert pool.endpoints[0].client.events_offered is True
    assert steps == sorted(steps) and steps[-1] == 7 and view.total_steps == 7
    t = view.timings
    assert t.sent <= t.accepted <= t.first_running <= t.completed and t.inference_s > 0
