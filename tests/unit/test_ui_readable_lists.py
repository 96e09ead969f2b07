"""What the page shows in words where it once showed raw JSON or nothing: a video's parameters and the doctor's
report as label: value lists, the time left on a tile, the player sized to its video, plots that start empty."""

from __future__ import annotations

import re

import pandas as pd

from studio.backend.runs.request_state import RequestState, RequestView
from studio.protocol import ProgressEvent, VideoRequest
from studio.ui import figures, previews, tables
from studio.ui.markdown import flat_pairs, markdown_pairs, markdown_report, value_text
from studio.ui.server_tab import DOCTOR_HINT, doctor_text


def test_pairs_are_a_two_column_table_of_text():
    table = markdown_pairs([("frames", 9), ("prompt", "<b>x</b> | [a](http://e)"), ("sound", False), ("seed", None)])
    lines = table.splitlines()
    assert lines[:2] == ["| setting | value |", "|:--|:--|"]
    assert lines[2] == "| frames | 9 |" and lines[4] == "| sound | no |" and lines[5] == "| seed | – |"
    # A value is text: no tag, no link, and its bar cannot end the cell.
    assert "<b>" not in lines[3] and "\\[a\\]" in lines[3] and "&#124;" in lines[3]
    assert lines[3].count(" | ") == 1
    assert markdown_pairs([]) == ""


def test_values_read_as_words():
    assert value_text(True) == "yes" and value_text("") == "–" and value_text([1, 2]) == "1, 2"
    assert value_text({}) == "–" and value_text({"a": 1}) == '`` {"a": 1} ``'.replace("``", "`")


def test_nested_reports_read_part_by_part():
    report = {"python": "3.11", "torch": {"installed": True, "cuda": None}, "gpus": [{"name": "H100"}, {"name": "L4"}]}
    assert flat_pairs(report["torch"]) == [("installed", True), ("cuda", None)]
    assert ("gpus 1 · name", "L4") in flat_pairs(report)
    text = markdown_report(report, {"cuda": "CUDA"})
    assert "**torch**" in text and "| CUDA | – |" in text and "| gpus 0 · name | H100 |" in text
    assert "{" not in text  # no JSON left


def test_the_doctor_reads_as_lists():
    text = doctor_text({"python": "3.11.7", "disk_free_gib": 75.2, "nvidia": {"available": False, "note": "none"}})
    assert "| disk free (GiB) | 75\\.2 |" in text and "**nvidia**" in text and "| available | no |" in text
    assert doctor_text(None) == DOCTOR_HINT


def test_a_videos_parameters_are_a_list_in_the_forms_words():
    request = VideoRequest(prompt="a red circle", width=320, height=192, num_frames=9, num_inference_steps=4)
    view = RequestView(id="req_000000000001", run_id="run", position=1, request=request, state=RequestState.DONE)
    details = tables.details_markdown(view)
    assert "```" not in details and '"num_frames"' not in details
    assert (
        "| frames | 9 |" in details and "| steps | 4 |" in details and "| size (width x height) | 320x192 |" in details
    )
    assert "| width |" not in details  # said by its size


def running(steps_done: int = 3) -> RequestView:
    request = VideoRequest(prompt="a red circle", width=320, height=192, num_frames=33, num_inference_steps=35)
    view = RequestView(id="req_000000000002", run_id="run", position=1, request=request, state=RequestState.RUNNING)
    view.job_event(ProgressEvent(step=steps_done, total_steps=35, progress=9, elapsed_s=1.0, step_s=0.1))
    return view


def test_a_running_tile_shows_its_time_left_and_a_bar():
    html = previews.running_tiles([running()], None, lambda view: (42.0, 12.4))
    assert "~12 s left" in html and "step 3/35" in html
    assert re.search(r'class="tile-progress"[^>]*aria-valuenow="42"', html) and "width: 42%" in html
    # No estimate yet: no time said, the bar still there; a tile without the board's progress has neither.
    assert "left" not in previews.running_tiles([running()], None, lambda view: (5.0, None))
    assert "tile-progress" not in previews.running_tiles([running()], None)


def test_time_left_in_words():
    assert [previews.time_left_words(s) for s in (None, 0.4, 9.6, 59, 64, 125, 3600)] == [
        "",
        "finishing",
        "~10 s left",
        "~59 s left",
        "~1 min left",
        "~2 min left",
        "~60 min left",
    ]
    assert previews.time_left_words(95) == "~1 min 40 s left"


def test_the_player_box_is_at_most_twice_the_video():
    box = previews.player_box("<video></video>", 320, 192)
    assert "max-width: min(640px, calc(70vh * 1.6667))" in box and "margin: 0 auto" in box and "<video>" in box
    assert previews.player_box("", 320, 192) == "" and previews.player_box("<video></video>", 0, 0) == "<video></video>"


def test_empty_plots_get_typed_frames_and_every_colour():
    latency, throughput, timeline = figures.latency_curve([]), figures.throughput_curve([]), figures.timeline_bars([])
    for frame in (latency, throughput):
        assert frame.empty and all(pd.api.types.is_numeric_dtype(dtype) for dtype in frame.dtypes)
    drawn = timeline[timeline[figures.PHASE] != figures.BEFORE]
    assert set(timeline[figures.PHASE]) == set(figures.PHASE_COLORS) and (drawn[figures.SECONDS] == 0).all()
    assert figures.PageFigures(latency, timeline, throughput).empty
