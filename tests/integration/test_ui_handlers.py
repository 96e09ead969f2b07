"""The page's handlers against a real embedded engine, without a browser."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest
from PIL import Image

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState
from studio.ui import bench_view, figures, gallery, handlers, tables
from studio.ui.engine_status import engine_summary
from tests.conftest import MODEL_NAME, engine_settings
from tests.waiting import wait_for_async

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
    await wait_for_async(
        lambda: not controller.board.active(),
        "every request on the board to finish",
        240,
        detail=lambda: f"still active: {[v.state.value for v in controller.board.active()]}",
    )


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
    rows = tables.request_table(board)
    assert len(rows) == 4 and all((rows["state"] == "done") & (rows["progress"] == "100%"))
    stats = tables.counts_line(board.summary(), 0)
    assert "**4 completed**" in stats and tables.THROUGHPUT_COLUMN in tables.stats_table(board.summary()).columns
    items = gallery.gallery_items(board.done_newest_first(), lambda path: f"https://studio.test/files/{path}")
    assert len(items) == 4 and all(url.endswith(".jpg") for url, _ in items)
    for (url, _), view in zip(items, board.done_newest_first(), strict=True):
        poster = url.removeprefix("https://studio.test/files/")
        assert Path(poster) == view.video_path.with_suffix(".jpg")  # the poster beside its video
        with Image.open(poster) as image:
            assert image.format == "JPEG" and image.size == (256, 256)
        assert gallery.request_id_in({"image": {"url": url}}) == view.id
    page = figures.page_figures(board)
    timeline = page.timeline
    assert timeline[figures.REQUEST].nunique() == 4
    drawn = timeline[timeline[figures.SECONDS] > 0]
    assert drawn[drawn[figures.PHASE] == figures.INFERENCE][figures.REQUEST].nunique() == 4  # each one's inference
    assert figures.QUEUE_WAIT in set(drawn[figures.PHASE])
    # Every phase is in the data from the first request, last first: the bars stack in time order and every
    # phase has its colour.
    assert list(dict.fromkeys(timeline[figures.PHASE])) == list(reversed(figures.PHASE_COLORS))
    assert all(timeline.groupby(figures.REQUEST).size() == len(figures.PHASE_COLORS))
    latency = page.latency  # four latencies, cumulative, in steps from 0 s up to the longest one
    summary = board.summary()
    assert latency[figures.WITHIN].iloc[-1] == 100.0 and latency[figures.WITHIN].is_monotonic_increasing
    assert latency[figures.LATENCY].is_monotonic_increasing and latency[figures.LATENCY].iloc[0] == 0.0
    assert latency[figures.LATENCY].iloc[-1] == pytest.approx(summary.latency_max_s, abs=0.01)
    throughput = page.throughput  # videos/min while in flight, so far: it ends at the statistics' figure
    assert len(throughput) >= 2 and throughput[figures.THROUGHPUT].iloc[0] == 0.0
    assert throughput[figures.THROUGHPUT].iloc[-1] == pytest.approx(summary.throughput_per_min, abs=0.01)
    assert tables.history_table(controller)["run"].iloc[0] == run.id

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
        await wait_for_async(
            lambda: any(v.state is RequestState.RUNNING for v in run.views), "a request of the run to be running", 120
        )
        stopped = controller.board.cancel_all()
        assert stopped == 6, [(v.state, v.error) for v in run.views]
        await wait_finished(controller)
        return run

    run = asyncio.run(main())
    assert all(v.state is RequestState.CANCELLED for v in run.views)
    import httpx

    metrics = httpx.get(controller.fleet.server.base_url + "/metrics").text
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
        ({"steps": 0}, "steps must be from 1 to 200, got 0"),
        ({"steps": 500}, "steps must be from 1 to 200, got 500"),
        ({"guidance": -1}, "guidance must be from 0 to 20, got -1"),
        ({"guidance": 100}, "guidance must be from 0 to 20, got 100"),
        ({"seed": "abc"}, "seed must be a whole number"),
        ({"seed": str(2**70)}, "seed must be from 0 to 9223372036854775807"),  # protocol.MAX_SEED
        ({"concurrency": 0}, "concurrency must be from 1 to 256, got 0"),
        ({"concurrency": 10**6}, "concurrency must be from 1 to 256, got 1000000"),
        ({"copies": 0}, "copies per prompt must be from 1 to 64, got 0"),
        ({"negative_prompt": "x" * 25_000}, "negative prompt may have at most 20000 characters, got 25000"),
        ({"frames": "many"}, "frames must be a whole number, got 'many'"),
        ({"steps": 2.5}, "steps must be a whole number"),
        ({"guidance": "high"}, "guidance must be a number, got 'high'"),
        ({"concurrency": "all"}, "concurrency must be a whole number"),
        ({"tier": "8k"}, "unknown tier '8k'"),
        ({"aspect": "5:3"}, "unknown aspect '5:3'"),
        ({"seed_policy": "sometimes"}, "seed per copy must be 'fixed', 'random' or 'increment', got sometimes"),
    ],
)
def test_bad_input_gets_a_clear_message(controller, change, message):
    before = len(controller.board.runs)
    status = asyncio.run(handlers.submit(controller, {**FORM, **change}))
    assert status.startswith("**cannot generate**") and message in status
    assert len(controller.board.runs) == before  # nothing was queued


@pytest.mark.parametrize(
    ("change", "wrong"),
    [
        ({"prompts": "", "frames": -5, "steps": 100000}, {"prompts", "frames", "steps"}),
        ({"frames": 9999, "steps": 0}, {"frames", "steps"}),
        ({"frames": 9999, "fps": 7, "guidance": 100}, {"frames", "fps", "guidance"}),
    ],
)
def test_every_wrong_field_is_named_at_once(controller, change, wrong):
    found = handlers.form_problems(controller, {**FORM, **change})
    assert set(found) == wrong
    status = asyncio.run(handlers.submit(controller, {**FORM, **change}))
    assert all(found[name] in status for name in wrong), status


def test_uploads_are_checked(controller, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    status = asyncio.run(handlers.submit(controller, {**FORM, "image": str(text)}))
    assert "must be an image" in status
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"\x89PNG garbage")
    assert "not a readable image" in asyncio.run(handlers.submit(controller, {**FORM, "image": str(fake)}))
    disguised = tmp_path / "animation.png"  # a GIF by its content: engines read no GIF
    Image.new("RGB", (8, 8)).save(disguised, format="GIF")
    assert "not a readable image" in asyncio.run(handlers.submit(controller, {**FORM, "image": str(disguised)}))
    real = tmp_path / "first_frame.webp"
    Image.new("RGB", (256, 256), "red").save(real, format="WEBP")
    assert handlers.build_spec({**FORM, "image": str(real)}, controller).input_reference == real
    huge = tmp_path / "huge.png"
    huge.write_bytes(b"\0" * (handlers.MAX_UPLOAD_BYTES + 1))
    assert "larger than" in asyncio.run(handlers.submit(controller, {**FORM, "image": str(huge)}))


def test_export_refuses_unknown_runs(controller):
    with pytest.raises(ValueError, match="no run"):
        handlers.export_run(controller, "../../etc/passwd", "json")


BENCH_FORM = {
    "requests": 2,
    "concurrencies": "1,2",
    "tiers": ["256p"],
    "guardrails": ["on"],
    "aspect": "1:1",
    "frames": 5,
    "steps": 2,
    "request_rate": 0,
    "warmup": 0,
    "slo_s": 600,
    "prompts": "",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"requests": 0}, "requests must be from 1 to 1000, got 0"),
        ({"requests": "lots"}, "requests must be a valid integer"),
        ({"concurrencies": "1,a"}, "concurrency takes whole numbers"),
        ({"concurrencies": "0"}, "concurrency takes whole numbers from 1 to 256"),
        ({"concurrencies": ""}, "concurrency takes whole numbers"),
        ({"tiers": []}, "pick at least one tier"),
        ({"tiers": ["1080p"]}, "unknown tier '1080p'"),
        ({"guardrails": []}, "guardrails takes on, off or on,off"),
        ({"steps": 500}, "steps must be from 1 to 200, got 500"),
        ({"request_rate": -1}, "request rate must be more than 0, got"),
    ],
)
def test_bench_view_refuses_bad_settings_clearly(controller, change, message):
    async def main():
        return [update async for update in bench_view.run_bench_view(controller, {**BENCH_FORM, **change})]

    updates = asyncio.run(main())
    assert len(updates) == 1
    update = updates[0]
    assert update.status.startswith("**bench not started**") and message in update.status
    assert update.summary.empty and update.plots == [] and update.report is None


def test_bench_view_runs_every_cell_and_reports(controller):
    async def main():
        updates = []
        async for update in bench_view.run_bench_view(controller, BENCH_FORM):
            if not updates:
                # While it runs, a second bench is refused rather than mixed into the first one's figures.
                second = [u async for u in bench_view.run_bench_view(controller, BENCH_FORM)]
                assert "already running" in second[0].status
            updates.append(update)
        return updates

    updates = asyncio.run(main())
    last = updates[-1]
    assert last.status.startswith("done in"), last.status
    assert any(u.status.startswith("running cell") for u in updates[:-1])
    cells = last.summary
    assert list(cells["concurrency"]) == [1, 2] and all(cells["completed"] == 2) and all(cells["failed"] == 0)
    report = json.loads(Path(last.report).read_text())
    assert [cell["concurrency"] for cell in report["cells"]] == [1, 2]
    assert len(report["requests"]) == 4 and all(r["state"] == "done" for r in report["requests"])
    assert len(last.plots) == 3 and all(Path(p).read_bytes()[:8].startswith(b"\x89PNG") for p in last.plots)
    assert "256p: lowest latency at concurrency" in last.recommendation
    # The bench's requests are in history like any other run.
    assert sum(run["requests"] for run in controller.store.recent_runs()) >= 4


def test_server_form_keeps_what_it_leaves_blank():
    from studio.config import StudioSettings
    from studio.ui.server_tab import settings_values

    current = StudioSettings(api_key="sk-kept", tensor_parallel_size=2)
    form = {"remote_urls": " http://a:1 , http://b:2 ", "api_key": "", "tensor_parallel_size": None, "gpus": " "}
    values = StudioSettings.model_validate(settings_values(current, form))
    assert values.remote_urls == ["http://a:1", "http://b:2"]
    assert values.api_key_value() == "sk-kept" and values.tensor_parallel_size == 2 and values.gpus is None


def test_cancel_from_a_selected_row_and_the_status_line_follows(controller):
    async def main():
        await handlers.submit(controller, {**FORM, "frames": 33, "steps": 200, "copies": 2, "concurrency": 1})
        run = controller.board.runs[-1]
        await wait_for_async(
            lambda: any(v.state is RequestState.RUNNING for v in run.views), "a request of the run to be running", 120
        )
        running = next(v for v in run.views if v.state is RequestState.RUNNING)
        # The table shows a short id; selecting its row gives the full id, and both cancel it.
        shown = tables.request_table(controller.board).set_index("state").loc["running", "id"]
        assert shown == tables.short(running.id) and handlers.full_request_id(controller.board, shown) == running.id
        one = [line async for line in handlers.cancel_request(controller.board, shown)]
        assert running.state is RequestState.CANCELLED
        everything = [line async for line in handlers.cancel_all(controller.board)]
        return run, one, everything

    run, one, everything = asyncio.run(main())
    assert one[-1] == f"{tables.short(run.views[0].id)}: cancelled 1 request"
    assert everything == ["cancelling 3 requests ...", "cancelled 3 requests"]
    assert all(v.state is RequestState.CANCELLED for v in run.views)
    timeline = figures.timeline_frame(controller.board)
    cancelled = timeline[(timeline[figures.PHASE] == figures.CANCELLED) & (timeline[figures.SECONDS] > 0)]
    assert not cancelled.empty and figures.CANCELLED in figures.LEGEND  # cancelled bars have a legend entry


def test_a_shape_never_seen_says_no_estimate_yet():
    from studio.backend.runs.board import RequestBoard
    from studio.backend.runs.request_state import RequestView
    from studio.backend.visitors import LOCAL_OPERATOR
    from studio.protocol import VideoRequest

    class OneRun:
        def __init__(self, views):
            self.id = "run_x"
            self.views = views
            self.visitor = LOCAL_OPERATOR

        def add_listener(self, listener):
            pass

    view = RequestView("req_0123456789ab", "run_x", 0, VideoRequest(prompt="p", width=64, height=64))
    view.state, view.timings.first_running = RequestState.RUNNING, view.timings.created
    board = RequestBoard()
    board.add_run(OneRun([view]))
    row = tables.request_table(board).iloc[0]
    assert row["progress"] == "–" and row["note"].startswith("no estimate yet")


def test_the_run_requests_table_names_its_columns_and_rounds():
    rows = [
        {
            "id": "req_1",
            "prompt": "p",
            "state": "done",
            "latency_s": 13.56493854522705,
            "studio_wait_s": 0.3,
            "queue_wait_s": 0.123456,
            "inference_s": 12.987654,
            "download_s": 0.15,
            "server_latency_s": 13.26493854522705,
            "seed": 3,
            "error": None,
        }
    ]
    table = tables.run_request_table(rows)
    assert list(table.columns) == tables.RUN_REQUEST_COLUMNS and all(not str(c).isdigit() for c in table.columns)
    assert table.iloc[0]["latency s"] == 13.56 and table.iloc[0][tables.INFERENCE_COLUMN] == 12.99
    assert table.iloc[0][tables.FROM_SENDING_COLUMN] == 13.26


def test_bench_goodput_without_an_slo_says_why():
    cell = {name: None for name in bench_view.SUMMARY_COLUMNS} | {"guardrails": True, "concurrency": 1}
    table = bench_view.summary_table({"cells": [cell]})
    assert table["goodput"].iloc[0] == bench_view.NO_SLO


def test_the_server_tab_starts_again_after_a_stop(controller):
    from studio.ui import server_tab

    stopped = asyncio.run(server_tab.stop_server(controller))
    assert stopped.startswith("stopped") and not controller.ready()
    # Said once, and with no exit code: the studio stopped it, it did not end on its own.
    assert engine_summary(controller).endswith(": stopped"), engine_summary(controller)
    state = server_tab.server_state_markdown(controller)
    assert state.startswith("**stopped**") and "exit code" not in state and "exit code" not in stopped

    async def submit_while_stopped_then_start() -> tuple[str, str]:
        # Taken while no server is up: it waits for one (up to --server-wait), and is made once Start brings it back.
        status = await handlers.submit(controller, {**FORM, "copies": 1, "prompts": "while stopped"})
        started = await server_tab.start_server(controller)
        await wait_finished(controller)
        return status, started

    waited, started = asyncio.run(submit_while_stopped_then_start())
    assert waited.startswith("queued 1"), waited
    assert started.startswith("started") and controller.ready(), started
    assert controller.board.runs[-1].views[0].state is RequestState.DONE

    async def generate():
        status = await handlers.submit(controller, {**FORM, "copies": 1, "prompts": "after"})
        await wait_finished(controller)
        return status

    assert asyncio.run(generate()).startswith("queued 1")
    assert controller.board.runs[-1].views[0].state is RequestState.DONE
