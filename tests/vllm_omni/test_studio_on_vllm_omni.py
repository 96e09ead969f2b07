"""The studio against the real vLLM-Omni server: start, generate, concurrency, cancel, errors, metrics, crash."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from studio.backend.clients.base import RequestRejected
from studio.backend.clients.router import EndpointPool
from studio.backend.clients.vllm_omni import VideoClient
from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.servers.metrics import scrape
from studio.backend.servers.supervisor import ServerStartError, ServerState, group_members
from studio.media import probe_mp4
from studio.protocol import VideoRequest, error_message
from tests.conftest import WAN_DIR
from tests.vllm_omni.conftest import API_KEY, VLLM, start_vllm, vllm_settings
from tests.waiting import wait_for_async

pytestmark = pytest.mark.timeout(900)
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def small_spec(prompts: list[str], **values) -> RunSpec:
    return RunSpec(prompts=prompts, **{"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, **values})


def test_production_argv_and_ready(vllm_server):
    status = vllm_server.status()
    assert status.state is ServerState.READY and status.startup_s > 0
    argv = status.command.split()
    assert argv[1:4] == ["serve", str(WAN_DIR), "--omni"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(vllm_server.port)
    assert argv[argv.index("--init-timeout") + 1] == "600"
    assert "--no-guardrails" in argv and "--log-stats" in argv
    assert API_KEY not in status.command and all(API_KEY not in line for line in vllm_server.log_tail(400))
    assert httpx.get(vllm_server.base_url + "/v1/models").status_code == 401  # the key came through the env
    assert httpx.get(vllm_server.base_url + "/v1/models", headers=HEADERS).status_code == 200


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"extra_serve_args": "--no-such-flag"}, "unrecognized arguments: --no-such-flag"),
        ({"model": "/nonexistent/model-dir"}, "/nonexistent/model-dir"),
    ],
)
def test_bad_flag_or_model_fails_fast_with_the_servers_error(tmp_path, values, words):
    started = time.monotonic()
    with pytest.raises(ServerStartError) as failure:
        start_vllm(tmp_path, **values)
    assert time.monotonic() - started < 300  # the process's own exit, not the 600 s init timeout
    assert "before it was ready" in str(failure.value) and words in str(failure.value)


def studio_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMNI_STUDIO_API_KEY": API_KEY}
    return subprocess.run([sys.executable, "-m", "studio", *args], capture_output=True, text=True, timeout=900, env=env)


def test_generate_on_a_managed_vllm_omni(tmp_path):
    result = studio_cli(
        "generate",
        "a red circle",
        "--engine",
        "vllm-omni",
        "--model",
        str(WAN_DIR),
        "--vllm",
        VLLM,
        "--no-server-guardrails",
        "--tier",
        "256p",
        "--aspect",
        "1:1",
        "--frames",
        "6",
        "--steps",
        "2",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    info = probe_mp4(Path(result.stdout.strip().splitlines()[-1]))
    assert (info.width, info.height, info.num_frames) == (256, 256, 9)  # 6 asked, 4k+1 = 9 sent and made


def test_generate_on_a_remote_url(vllm_server, tmp_path):
    result = studio_cli(
        "generate",
        "a blue square",
        "--engine",
        "remote",
        "--url",
        vllm_server.base_url + "/v1",
        "--tier",
        "256p",
        "--aspect",
        "16:9",
        "--frames",
        "9",
        "--steps",
        "2",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    info = probe_mp4(Path(result.stdout.strip().splitlines()[-1]))
    assert (info.width, info.height, info.num_frames) == (320, 192, 9)


def test_four_concurrent_requests_run_one_after_another(vllm_server, tmp_path):
    pool = EndpointPool.from_urls([vllm_server.base_url], api_key=API_KEY, poll_interval_s=0.05)
    store = OutputStore(tmp_path / "outputs")

    async def main():
        run = Run(small_spec([f"request {i}" for i in range(4)], frames=9, steps=6, concurrency=4), pool, store)
        await run.wait()
        await pool.close()
        return run

    run = asyncio.run(main())
    assert [v.state for v in run.views] == [RequestState.DONE] * 4
    # vLLM-Omni offers no job events: the client found so once, and polled.
    assert pool.endpoints[0].client.events_offered is False and all(v.step is None for v in run.views)
    by_start = sorted(run.views, key=lambda v: v.timings.first_running or v.timings.completed)
    waits = [v.timings.queue_wait_s for v in by_start]
    inference = [v.timings.inference_s for v in by_start]
    # The server runs one at a time: each waits about as long as the ones before it took.
    assert all(later > earlier for earlier, later in itertools.pairwise(waits)), waits
    assert waits[-1] > 1.5 * min(inference)
    for view in by_start:
        t = view.timings
        # vLLM-Omni's inference_time_s counts from acceptance; the studio separates the queue wait.
        assert t.server_inference_s >= t.inference_s and t.queue_wait_s + t.inference_s <= t.server_s + 0.01


def test_delete_queued_job_and_real_error_messages(vllm_server, tmp_path):
    async def main():
        async with VideoClient(vllm_server.base_url, api_key=API_KEY, poll_interval_s=0.05) as client:
            first = await client.create(
                VideoRequest(prompt="long", width=256, height=256, num_frames=33, num_inference_steps=30)
            )
            second = await client.create(
                VideoRequest(prompt="queued", width=64, height=64, num_frames=5, num_inference_steps=2)
            )
            assert (await client.retrieve(second.id)).status == "queued"
            assert await client.cancel(second.id) is True
            with pytest.raises(RequestRejected, match="Video not found") as gone:
                await client.retrieve(second.id)
            assert gone.value.status_code == 404
            with pytest.raises(RequestRejected, match="Model mismatch"):
                await client.create(VideoRequest(prompt="x", model="not-this-model", width=64, height=64))
            await client.cancel(first.id)

    asyncio.run(main())
    with httpx.Client(base_url=vllm_server.base_url, headers=HEADERS, timeout=60) as http:
        cases = [
            ({"files": {"prompt": (None, "x"), "size": (None, "640x")}}, "body.size"),
            ({"files": {"prompt": (None, "x"), "extra_params": (None, "[1]")}}, "expected dict, got list"),
            ({"json": {"prompt": "x"}}, "body.prompt"),
        ]
        for kwargs, words in cases:
            response = http.post("/v1/videos", **kwargs)
            assert response.status_code == 400
            body = response.json()
            assert words in (error_message(body) + json.dumps(body))


def test_metrics_show_running_and_waiting(vllm_server):
    async def main():
        async with VideoClient(vllm_server.base_url, api_key=API_KEY) as client:
            jobs = [
                await client.create(
                    VideoRequest(prompt=f"m{i}", width=256, height=256, num_frames=33, num_inference_steps=20)
                )
                for i in range(2)
            ]
            seen = None

            async def one_running_one_waiting() -> bool:
                nonlocal seen
                seen = await scrape(vllm_server.base_url)
                return seen.running == 1 and seen.waiting == 1

            try:
                await wait_for_async(
                    one_running_one_waiting,
                    "the metrics to show one job running and one waiting",
                    120,
                    poll_s=0.2,
                    detail=lambda: f"last scrape: {seen}",
                )
            finally:
                for job in jobs:
                    await client.cancel(job.id)
            return seen

    seen = asyncio.run(main())
    assert seen.error is None and (seen.running, seen.waiting) == (1, 1)


def test_killed_server_fails_in_flight_keeps_finished_and_restarts(tmp_path):
    controller = StudioController(vllm_settings(outputs_dir=tmp_path / "outputs"))
    controller.start()
    try:

        async def main():
            first = controller.new_run(small_spec(["finished first"]))
            await first.wait()
            run = controller.new_run(small_spec(["in flight"], frames=33, steps=60))
            run.start()
            view = run.views[0]
            await wait_for_async(lambda: view.state is RequestState.RUNNING, "the request to be running", 120)
            os.killpg(controller.fleet.server.pid, signal.SIGKILL)
            killed = time.monotonic()
            await run.wait()
            return first.views[0], view, time.monotonic() - killed

        done, crashed, fail_s = asyncio.run(main())
        assert crashed.state is RequestState.FAILED and "crashed" in crashed.error and fail_s < 5
        assert done.state is RequestState.DONE and probe_mp4(done.video_path).num_frames == 5
        controller.restart()
        assert controller.fleet.server.state is ServerState.READY
        pgid = controller.fleet.server.pid
    finally:
        controller.close()
    assert group_members(pgid) == []
