"""A run the studio's board no longer holds is answered from history, to its owner and operators alone, in the
shape of a live run's record: its requests, their states and seeds, and a video's path for operators only."""

from __future__ import annotations

import gradio as gr
import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.spec import RunSpec
from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.config import StudioSettings
from studio.ui.api import history_record
from studio.ui.file_links import FileLinks

ALICE = Visitor("alice", "Alice", operator=False)
BOB = Visitor("bob", "Bob", operator=False)


@pytest.fixture
def controller(tmp_path):
    settings = StudioSettings(
        _env_file=None, engine="remote", remote_urls=["http://127.0.0.1:9"], outputs_dir=tmp_path / "outputs"
    )
    controller = StudioController(settings)
    controller.start()
    yield controller
    controller.close()


def test_a_run_off_the_board_is_read_from_history_by_its_owner_alone(controller):
    spec = RunSpec(prompts=["a", "b"], tier="256p", aspect="1:1", frames=5, steps=2, seed=7, seed_policy="increment")
    run = controller.new_run(spec, ALICE)  # in history from the start; never started
    links = FileLinks(controller.store.root)
    record = history_record(controller, run.id, ALICE, links, None)
    assert record["run_id"] == run.id and not record["finished"] and record["states"] == {"waiting": 2}
    assert [(item["id"], item["seed"]) for item in record["requests"]] == [(v.id, v.request.seed) for v in run.views]
    assert all("video_path" not in item for item in record["requests"])  # a path on the studio's machine
    assert all(
        "video_path" in item for item in history_record(controller, run.id, LOCAL_OPERATOR, links, None)["requests"]
    )
    for stranger, run_id in ((BOB, run.id), (ALICE, "run_nope")):
        with pytest.raises(gr.Error, match="of yours in this studio"):
            history_record(controller, run_id, stranger, links, None)
