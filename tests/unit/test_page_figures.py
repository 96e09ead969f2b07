"""The Generate tab's figures and tables of a board of finished runs: latency from pressing Generate, throughput
while in flight, plots of the latest run or the session, the owner column and History's counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studio.backend.clients.router import EndpointPool
from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore
from studio.backend.visitors import Visitor
from studio.ui import figures, tables

ALICE = Visitor(id="guest:5f3a9c0d1e2b", name="guest 5f3a9c")
BOB = Visitor(id="user:bob", name="bob")


@pytest.fixture
def store(tmp_path):
    store = OutputStore(tmp_path / "outputs")
    yield store
    store.close()


@pytest.fixture
def board() -> RequestBoard:
    return RequestBoard()


def add_run(board: RequestBoard, store: OutputStore, copies: int, visitor: Visitor = ALICE) -> Run:
    pool = EndpointPool.from_urls(["http://127.0.0.1:9"])
    run = Run(RunSpec(prompts=["a red circle"], copies=copies, tier="256p", frames=5), pool, store, visitor=visitor)
    board.add_run(run)
    return run


def made(view: RequestView, created: float, sent: float, took: float, download: float = 0.1) -> None:
    """Done: submitted at `created`, sent at `sent`, made in `took` s, on disk `download` s later."""
    t = view.timings
    t.created, t.sent, t.accepted, t.last_queued = created, sent, sent, sent
    t.completed = sent + took
    t.downloaded = t.completed + download
    view.state, view.finished_at, view.progress = RequestState.DONE, t.downloaded, 100.0


def ended(view: RequestView, state: RequestState, created: float, at: float, sent: float | None = None) -> None:
    """Failed or cancelled at `at`, without a video."""
    view.timings.created, view.timings.sent = created, sent
    view.state, view.finished_at, view.error = state, at, f"{state.value} here"


def one_at_a_time(run: Run, start: float, each_s: float = 5.0) -> None:
    """Its copies submitted at `start`, made one after the other."""
    for k, view in enumerate(run.views):
        made(view, created=start, sent=start + each_s * k, took=each_s - 0.1)


def column(frame, name):
    return list(frame[name])


def test_statistics_count_the_wait_in_the_studio_as_the_table_does(board, store):
    run = add_run(board, store, copies=6)
    one_at_a_time(run, start=1000.0)
    table = tables.request_table(board, ALICE)
    elapsed = column(table, tables.ELAPSED_COLUMN)
    assert elapsed == pytest.approx([5.0, 10.0, 15.0, 20.0, 25.0, 30.0], abs=0.05)
    stats = tables.board_stats_table(board, ALICE).set_index("figures of")
    assert stats.loc["latest run", "max s"] >= max(elapsed) - 0.05
    assert stats.loc["latest run", "p50 s"] == pytest.approx(17.5, abs=0.01)
    assert stats.loc["latest run", "mean studio wait s"] == pytest.approx(12.5, abs=0.01)
    # Each row's parts add up to its elapsed time.
    parts = table[
        [tables.STUDIO_WAIT_COLUMN, tables.QUEUE_WAIT_COLUMN, tables.INFERENCE_COLUMN, tables.DOWNLOAD_COLUMN]
    ]
    assert list(parts.sum(axis=1)) == pytest.approx(elapsed, abs=0.05)
    # The latency plot spans the same latencies.
    latency = figures.latency_frame(board, ALICE)
    assert latency[figures.LATENCY].max() == pytest.approx(30.0, abs=0.01)


def test_throughput_is_per_run_over_its_time_in_flight_and_the_plot_agrees(board, store):
    first = add_run(board, store, copies=1)
    one_at_a_time(first, start=1000.0, each_s=20.0)
    batch = add_run(board, store, copies=5)
    one_at_a_time(batch, start=1240.0, each_s=6.0)  # 4 minutes later: 5 videos in 30 s
    stats = tables.board_stats_table(board, ALICE).set_index("figures of")
    assert stats.loc["latest run", tables.THROUGHPUT_COLUMN] == pytest.approx(10.0)
    assert stats.loc["latest run", "in flight s"] == pytest.approx(30.0)
    assert stats.loc["session", tables.THROUGHPUT_COLUMN] == pytest.approx(6 / 50 * 60)  # idle gap left out
    for span, row in ((figures.LATEST_RUN, "latest run"), (figures.SESSION, "session")):
        curve = figures.page_figures(board, ALICE, span).throughput
        assert curve[figures.THROUGHPUT].iloc[-1] == pytest.approx(stats.loc[row, tables.THROUGHPUT_COLUMN], abs=0.01)
        assert curve[figures.IN_FLIGHT].iloc[-1] == pytest.approx(stats.loc[row, "in flight s"], abs=0.01)


def test_one_video_draws_a_step_from_zero_and_its_rate_matches(board, store):
    run = add_run(board, store, copies=1)
    made(run.views[0], created=500.0, sent=500.0, took=19.16)
    page = figures.page_figures(board, ALICE)
    latency = page.latency
    assert len(latency) >= 3 and latency[figures.LATENCY].iloc[0] == 0.0
    assert latency[figures.LATENCY].is_monotonic_increasing and latency[figures.LATENCY].is_unique
    assert latency[figures.WITHIN].iloc[-1] == 100.0 and latency[figures.LATENCY].iloc[-1] == pytest.approx(19.26)
    stats = tables.board_stats_table(board, ALICE).set_index("figures of")
    assert list(stats.index) == ["latest run"]  # one run: no session row repeating it
    assert page.throughput[figures.THROUGHPUT].iloc[-1] == pytest.approx(stats.loc["latest run", THROUGHPUT])


THROUGHPUT = tables.THROUGHPUT_COLUMN


def test_plots_show_the_latest_run_by_default_and_the_session_without_idle_gaps(board, store):
    first = add_run(board, store, copies=2)
    one_at_a_time(first, start=1000.0)
    second = add_run(board, store, copies=3)
    one_at_a_time(second, start=5000.0)
    latest = figures.page_figures(board, ALICE).timeline
    assert set(latest[figures.REQUEST_ID]) == {v.id for v in second.views}
    session = figures.page_figures(board, ALICE, figures.SESSION).timeline
    assert set(session[figures.REQUEST_ID]) == {v.id for v in first.views + second.views}
    starts = session[session[figures.PHASE] == figures.BEFORE].set_index(figures.REQUEST_ID)[figures.SECONDS]
    assert starts[second.views[0].id] == pytest.approx(10.0)  # right after the first run's 10 s, not 4000 s on
    bars = session[session[figures.PHASE] != figures.BEFORE].groupby(figures.REQUEST_ID)[figures.SECONDS].sum()
    assert bars[second.views[2].id] == pytest.approx(15.0)  # a bar ends where its latency does


def test_a_request_that_failed_at_once_still_shows_red(board, store):
    run = add_run(board, store, copies=3)
    made(run.views[0], created=100.0, sent=100.0, took=8.0)
    ended(run.views[1], RequestState.FAILED, created=100.0, at=100.0, sent=100.0)  # lasted no time
    ended(run.views[2], RequestState.CANCELLED, created=100.0, at=101.0)  # never sent
    timeline = figures.timeline_frame(board, ALICE)
    failed = timeline[(timeline[figures.REQUEST_ID] == run.views[1].id) & (timeline[figures.PHASE] == figures.FAILED)]
    assert failed[figures.SECONDS].iloc[0] > 0 and failed[figures.LASTED].iloc[0] == 0.0
    cancelled = timeline[timeline[figures.REQUEST_ID] == run.views[2].id].set_index(figures.PHASE)
    assert cancelled.loc[figures.CANCELLED, figures.SECONDS] > 0
    assert cancelled.loc[figures.STUDIO_WAIT, figures.SECONDS] == pytest.approx(1.0)
    # Every request lists every phase, last first (see figures.PHASE_COLORS).
    assert all(timeline.groupby(figures.REQUEST).size() == len(figures.PHASE_COLORS))


def test_everyone_view_names_each_owner_and_a_visitors_own_view_does_not(board, store):
    one_at_a_time(add_run(board, store, copies=1, visitor=ALICE), start=100.0)
    one_at_a_time(add_run(board, store, copies=1, visitor=BOB), start=200.0)
    everyone = tables.request_table(board, None)
    assert list(everyone.columns) == tables.EVERYONE_REQUEST_COLUMNS
    assert column(everyone, tables.OWNER_COLUMN) == ["bob", "guest 5f3a9c"]  # names, never ids
    assert not any(ALICE.id in str(value) for value in everyone.to_numpy().ravel())
    own = tables.request_table(board, ALICE)
    assert tables.OWNER_COLUMN not in own.columns and len(own) == 1


def test_history_counts_the_cancelled_requests_of_a_run(board, store):
    run = add_run(board, store, copies=12)
    for view in run.views[:2]:
        store.update_request(view.id, state="done")
    for view in run.views[2:]:
        store.update_request(view.id, state="cancelled")
    history = tables.history_table(SimpleNamespace(store=store)).iloc[0]
    assert (history["requests"], history["done"], history["failed"], history["cancelled"]) == (12, 2, 0, 10)
    assert (history["tier"], history["aspect"]) == (run.spec.tier, run.spec.aspect)


def test_the_run_requests_table_gives_the_latency_from_generate_and_the_server_side_figure_apart():
    new = {"id": "req_1", "prompt": "p", "state": "done", "seed": 3, "error": None}
    new |= {"latency_s": 12.3456, "studio_wait_s": 7.0, "queue_wait_s": 0.2, "inference_s": 5.0, "download_s": 0.1}
    new |= {"server_latency_s": 5.3456}
    row = tables.run_request_table([new]).iloc[0]
    assert (row["latency s"], row[tables.STUDIO_WAIT_COLUMN], row[tables.FROM_SENDING_COLUMN]) == (12.35, 7.0, 5.35)
    # A row that holds only the figure from sending shows it under that name, and no latency.
    old = {k: v for k, v in new.items() if k not in ("studio_wait_s", "download_s", "server_latency_s")}
    old["latency_s"] = 5.3456
    row = tables.run_request_table([old]).iloc[0]
    assert row[tables.FROM_SENDING_COLUMN] == 5.35 and row.isna()["latency s"]
