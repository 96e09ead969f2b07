"""The page's handlers against a real embedded engine, without a browser."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from studio.backend.controller import StudioController
from studio.backend.runs import RequestState
from studio.ui import handlers
from tests.conftest import MODEL_NAME, engine_settings

pytestmark = pytest.mark.integration

FORM = {
    "prompts": "a red circle\na blue square",
    "negative_prompt": "",
    "tier": "256p",
    "aspect": "1:1",
    "frames": 5,
    "fps": "24",
    "steps": 2,
    "guidance": 6.0,
    "seed": "7",
    "seed_policy": "increment",
    "copies": 2,
    "concurrency": 4,
    "guardrails": True,
    "sound": False,
    "image": None,
}


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    controller = StudioController(
        engine_settings(outputs_dir=tmp_path_factory.mktemp("ui") / "outputs", poll_interval_s=0.05)
    )
    controller.start()
    yield controller
    controller.close()


async def wait_finished(controller: StudioController) -> None:
    while controller.board.active():
        await asyncio.sleep(0.05)


def test_submit_runs_everything_and_figures_follow(controller):
    async def main():
        status = await handlers.submit(controller, FORM)
        assert status.startswith("queued 4 requests")
        await wait_finished(controller)

    asyncio.run(main())
    board = controller.board
    run = board.runs[-1]
    assert [v.state for v in run.views] == [RequestState.DONE] * 4
    assert [v.request.seed for v in run.views] == [7, 8, 9, 10]
    rows = handlers.table_rows(board)
    assert len(rows) == 4 and all(row[3] == "done" and row[4] == "100%" for row in rows)
    stats = handlers.stats_markdown(board.summary(), 0)
    assert "**4 completed**" in stats and "videos/min" in stats
    items = handlers.gallery_items(board.done_newest_first())
    assert len(items) == 4 and all(path.endswith(".mp4") for path, _ in items)
    latency, timeline, throughput = handlers.figures(board)
    assert len(timeline.axes[0].patches) >= 8  # a queue and an inference bar per request
    assert sum(patch.get_height() for patch in latency.axes[0].patches) == 4  # four latencies in the histogram
    assert len(throughput.axes[0].lines) == 1
    assert handlers.history_rows(controller)[0][0] == run.id

    exported = handlers.export_run(controller, run.id, "csv")
    with exported.open() as handle:
        assert [row["state"] for row in csv.DictReader(handle)] == ["done"] * 4
    document = json.loads(handlers.export_run(controller, run.id, "json").read_text())
    assert document["spec"]["copies"] == 2 and len(document["requests"]) == 4
    assert handlers.rerun(controller, run.id).prompts == ["a red circle", "a blue square"]


def test_cancel_all_stops_in_flight_work(controller):
    async def main():
        await handlers.submit(controller, {**FORM, "frames": 33, "steps": 200, "copies": 3, "concurrency": 2})
        run = controller.board.runs[-1]
        while not any(v.state is RequestState.RUNNING for v in run.views):
            await asyncio.sleep(0.05)
        stopped = controller.board.cancel_all()
        assert stopped == 6, [(v.state, v.error) for v in run.views]
        await wait_finished(controller)
        return run

    run = asyncio.run(main())
    assert all(v.state is RequestState.CANCELLED for v in run.views)
    import httpx

    metrics = httpx.get(controller.server.base_url + "/metrics").text
    assert f'vllm_omni:num_requests_running{{model_name="{MODEL_NAME}"}} 0.0' in metrics
    assert f'vllm_omni:num_requests_waiting{{model_name="{MODEL_NAME}"}} 0.0' in metrics


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompts": "  \n  "}, "write at least one prompt"),
        ({"prompts": "x" * 100_001}, "at most"),
        ({"prompts": "bad\x00prompt"}, "NUL"),
        ({"frames": 0}, "frames must be between 5 and 400"),
        ({"frames": -1}, "frames must be between"),
        ({"frames": 100000}, "frames must be between"),
        ({"fps": "0"}, "fps must be one of"),
        ({"steps": 0}, "greater than or equal to 1"),
        ({"steps": 500}, "less than or equal to 200"),
        ({"guidance": -1}, "greater than or equal to 0"),
        ({"guidance": 100}, "less than or equal to 20"),
        ({"seed": "abc"}, "seed must be a whole number"),
        ({"seed": str(2**70)}, "less than or equal to 4294967295"),
        ({"concurrency": 0}, "greater than or equal to 1"),
        ({"concurrency": 10**6}, "less than or equal to 256"),
        ({"copies": 0}, "greater than or equal to 1"),
    ],
)
def test_bad_input_gets_a_clear_message(controller, change, message):
    before = len(controller.board.runs)
    status = asyncio.run(handlers.submit(controller, {**FORM, **change}))
    assert status.startswith("**cannot generate**") and message in status
    assert len(controller.board.runs) == before  # nothing was queued


def test_uploads_are_checked(controller, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    status = asyncio.run(handlers.submit(controller, {**FORM, "image": str(text)}))
    assert "must be an image" in status
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"\x89PNG garbage")
    assert "not a readable image" in asyncio.run(handlers.submit(controller, {**FORM, "image": str(fake)}))
    huge = tmp_path / "huge.png"
    huge.write_bytes(b"\0" * (handlers.MAX_UPLOAD_BYTES + 1))
    assert "larger than" in asyncio.run(handlers.submit(controller, {**FORM, "image": str(huge)}))


def test_export_refuses_unknown_runs(controller):
    with pytest.raises(ValueError, match="no run"):
        handlers.export_run(controller, "../../etc/passwd", "json")


BENCH_FORM = {
    "requests": 2,
    "concurrency": "1,2",
    "tiers": ["256p"],
    "guardrails": ["on"],
    "aspect": "1:1",
    "frames": 5,
    "steps": 2,
    "request_rate": 0,
    "warmup": 0,
    "slo_s": 600,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"requests": 0}, "requests per cell must be between 1 and 1000"),
        ({"requests": "lots"}, "requests per cell must be a number"),
        ({"concurrency": "1,a"}, "concurrency takes whole numbers"),
        ({"concurrency": "0"}, "each concurrency must be between 1 and 256"),
        ({"concurrency": ""}, "give at least one concurrency"),
        ({"tiers": []}, "pick at least one tier"),
        ({"tiers": ["1080p"]}, "unknown tier '1080p'"),
        ({"guardrails": []}, "pick guardrails on, off or both"),
        ({"steps": 500}, "steps must be between 1 and 200"),
        ({"request_rate": -1}, "request rate must be between 0 and 1000"),
    ],
)
def test_bench_view_refuses_bad_settings_clearly(controller, change, message):
    from studio.ui import bench_view

    async def main():
        return [update async for update in bench_view.run_bench_view(controller, {**BENCH_FORM, **change})]

    updates = asyncio.run(main())
    assert len(updates) == 1
    status, rows, _, plots, report = updates[0]
    assert status.startswith("**bench not started**") and message in status
    assert rows == [] and plots == [] and report is None


def test_bench_view_runs_every_cell_and_reports(controller):
    from studio.ui import bench_view

    async def main():
        updates = []
        async for update in bench_view.run_bench_view(controller, BENCH_FORM):
            if not updates:
                # While it runs, a second bench is refused rather than mixed into the first one's figures.
                second = [u async for u in bench_view.run_bench_view(controller, BENCH_FORM)]
                assert "already running" in second[0][0]
            updates.append(update)
        return updates

    updates = asyncio.run(main())
    status, rows, recommendation, plots, report_path = updates[-1]
    assert status.startswith("done in"), status
    assert any(u[0].startswith("running cell") for u in updates[:-1])
    assert [row[2] for row in rows] == [1, 2] and all(row[4] == 2 and row[5] == 0 for row in rows)
    report = json.loads(Path(report_path).read_text())
    assert [cell["concurrency"] for cell in report["cells"]] == [1, 2]
    assert len(report["requests"]) == 4 and all(r["state"] == "done" for r in report["requests"])
    assert len(plots) == 3 and all(Path(p).read_bytes()[:8].startswith(b"\x89PNG") for p in plots)
    assert "256p: lowest latency at concurrency" in recommendation
    # The bench's requests are in history like any other run.
    assert sum(run["requests"] for run in controller.store.recent_runs()) >= 4
