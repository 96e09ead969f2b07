"""What the page's own code decides about its look, without a browser: the theme's colour, numbers shown in one
format, the player's bounds. (tests/browser/test_layout_fits.py checks what a browser draws.)"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from studio.backend.bench import plots
from studio.ui.file_links import PLAYER_MAX_HEIGHT, FileLinks
from studio.ui.page import THEME
from studio.ui.tables import decimals


def test_the_theme_is_the_plots_blue():
    assert THEME.primary_500 == plots.INFERENCE_COLOR
    # "stop" buttons are outlined: only the primary action is filled with a colour.
    assert THEME.button_cancel_background_fill == "*background_fill_primary"


def test_numbers_of_a_column_are_shown_with_the_same_decimals():
    table = pd.DataFrame(
        {
            "id": ["a", "b", "c"],
            "latency s": [0.0, 0.31, 0.7],
            "queue s": [None, 1.0, 2.345],
            "seed": [7, 8, 9],
            "error": ["timed out", None, ""],
        }
    )
    shown = gr.Dataframe(interactive=False).postprocess(decimals(table))
    columns = list(zip(*shown.metadata["display_value"], strict=True))
    assert columns[1] == ("0.00", "0.31", "0.70")
    assert columns[2] == ("", "1.00", "2.35")  # nothing measured: blank, not "nan"
    assert columns[3] == ("7", "8", "9")  # whole numbers stay whole
    assert columns[4] == ("timed out", "", "")
    # The values themselves are kept (sorting, a selected row's value).
    assert [row[1] for row in shown.data] == [0.0, 0.31, 0.7]


def test_the_player_keeps_the_videos_shape_within_the_window(tmp_path):
    video = tmp_path / "videos" / "req_0123456789ab.mp4"
    video.parent.mkdir()
    video.write_bytes(b"")
    player = FileLinks(tmp_path).player(video, None, 720 / 1280)
    style = player.split('style="', 1)[1].split('"', 1)[0]
    rules = dict(rule.strip().split(":", 1) for rule in style.split(";") if rule.strip())
    rules = {name.strip(): value.strip() for name, value in rules.items()}
    assert rules["max-height"] == PLAYER_MAX_HEIGHT == "70vh"
    assert rules["max-width"] == "100%"
    assert rules["width"] == rules["height"] == "auto"  # the bounds scale it, in its shape
    assert rules["object-fit"] == "contain"
    assert rules["aspect-ratio"] == "0.5625"
    assert FileLinks(tmp_path).player(tmp_path.parent / "elsewhere.mp4", None) == ""
