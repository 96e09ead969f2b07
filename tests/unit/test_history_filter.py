"""History's filters: bench runs kept apart unless asked for, one tier, how a run stands, and a prompt search (its
words anywhere, case aside, `%` and `_` taken as themselves); a value from outside the choices means any."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.backend.runs.spec import RunSpec
from studio.backend.runs.store import OutputStore, RunFilter
from studio.protocol import VideoRequest
from studio.ui.history_tab import ANY, history_filter

pytestmark = pytest.mark.unit

RUNS = [
    # run id, tier, bench, prompts and how each request ended
    ("run_cat", "256p", False, [("a cat on a sofa", "done"), ("a cat jumping", "done")]),
    ("run_dog", "480p", False, [("a DOG running", "done"), ("a dog asleep", "failed")]),
    ("run_sea", "720p", False, [("the sea at 100% calm", "cancelled")]),
    ("run_busy", "256p", False, [("a_city at night", "running")]),
    ("run_cell", "256p", True, [("a cat on a sofa", "done")]),
]


@pytest.fixture
def store(tmp_path: Path) -> OutputStore:
    store = OutputStore(tmp_path)
    for at, (run_id, tier, bench, requests) in enumerate(RUNS):
        spec = RunSpec(prompts=[prompt for prompt, _ in requests], tier=tier, bench=bench)
        store.add_run(run_id, spec.model_dump(mode="json"), float(at), visitor_id="alice")
        for position, (prompt, state) in enumerate(requests):
            request_id = f"{run_id}_{position}"
            request = VideoRequest(prompt=prompt, width=320, height=192, num_frames=33)
            store.add_request(request_id, run_id, position, float(at), prompt, request.parameters())
            store.update_request(request_id, state=state)
    return store


def shown(store: OutputStore, only: RunFilter | None = None, visitor: str | None = "alice") -> list[str]:
    return [run["id"] for run in store.recent_runs(50, visitor, only)]


def test_bench_runs_stay_apart_unless_asked_for(store: OutputStore) -> None:
    people = ["run_busy", "run_sea", "run_dog", "run_cat"]
    assert shown(store, RunFilter()) == people
    assert shown(store, RunFilter(bench=True)) == ["run_cell", *people]
    assert shown(store) == ["run_cell", *people]  # no filter: every run (exports, quotas)


def test_tier_state_and_search_narrow_the_runs(store: OutputStore) -> None:
    assert shown(store, RunFilter(tier="256p")) == ["run_busy", "run_cat"]
    assert shown(store, RunFilter(state="done")) == ["run_cat"]
    assert shown(store, RunFilter(state="failed")) == ["run_dog"]
    assert shown(store, RunFilter(state="cancelled")) == ["run_sea"]
    assert shown(store, RunFilter(state="unfinished")) == ["run_busy"]
    assert shown(store, RunFilter(search="dog")) == ["run_dog"]  # "a DOG running": case aside
    assert shown(store, RunFilter(search="cat", bench=True)) == ["run_cell", "run_cat"]
    assert shown(store, RunFilter(search="100%")) == ["run_sea"]
    assert shown(store, RunFilter(search="%")) == ["run_sea"]  # a wildcard taken as itself
    assert shown(store, RunFilter(search="a_c")) == ["run_busy"]  # so is `_`
    assert shown(store, RunFilter(search="cat", tier="480p")) == []
    assert shown(store, RunFilter(), visitor="bob") == []  # another visitor's filters see only theirs


def test_the_filter_row_reads_only_its_own_choices() -> None:
    assert history_filter("  cat ", "done", "480p", True) == RunFilter(
        bench=True, tier="480p", state="done", search="cat"
    )
    assert history_filter(None, ANY, ANY, False) == RunFilter()
    # From the API, anything: what is not a choice means any, a long search is cut.
    odd = history_filter("x" * 10_000, "DROP TABLE runs", "1080p", "yes")
    assert odd == RunFilter(search="x" * 200)
