"""Each engine setting the studio offers is declared once, in the engine's settings: the studio's field has the
engine's default, bounds, title and help, and what the studio sets reaches the engine as the same value through the
engine's own flags."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studio.backend.servers.launchers import embedded_launch
from studio.engine.__main__ import build_parser, engine_settings
from studio.settings import EMBEDDED_ENGINE, EmbeddedEngineSettings, EngineSettings, StudioSettings

EXPOSED = EMBEDDED_ENGINE.settings

# A value away from the engine's default for each setting the studio offers.
SET_AWAY = {
    "device": "cpu",
    "threads": 3,
    "blocklist": Path("/tmp/other-blocklist.txt"),
    "step_cache": "taylor",
    "step_cache_interval": 4,
    "quantization": "fp8",
    "attention_backend": "sage",
    "previews": False,
    "preview_interval_s": 2.5,
}


def test_every_setting_offered_has_a_value_away_from_its_default_here():
    assert {setting.name for setting in EXPOSED} == set(SET_AWAY)
    for name, value in SET_AWAY.items():
        assert value != EngineSettings.model_fields[name].default, name


@pytest.mark.parametrize("setting", EXPOSED, ids=lambda setting: setting.name)
def test_the_studio_field_is_the_engines(setting):
    engine = EngineSettings.model_fields[setting.name]
    studio = StudioSettings.model_fields[setting.field_name]
    assert studio.default == engine.default
    assert studio.title == engine.title and studio.description == engine.description
    assert studio.metadata == engine.metadata  # ge, le, ...
    assert EmbeddedEngineSettings.model_fields[setting.field_name].description == engine.description


def test_a_narrowed_setting_offers_fewer_values_than_the_engine_takes():
    studio = StudioSettings(**{"engine_attention": "sage"})
    assert studio.engine_attention == "sage"
    with pytest.raises(ValueError, match="engine_attention"):
        StudioSettings(**{"engine_attention": "flash"})
    assert EngineSettings(attention_backend="flash").attention_backend == "flash"


def test_what_the_studio_sets_the_engine_reads_back_through_its_flags():
    studio = StudioSettings(**{setting.field_name: SET_AWAY[setting.name] for setting in EXPOSED})
    argv = embedded_launch(studio, port=8123).argv
    engine = engine_settings(build_parser().parse_args(argv[argv.index("studio.engine") + 1 :]))
    assert {name: getattr(engine, name) for name in SET_AWAY} == SET_AWAY


def test_defaults_add_no_flag_for_the_settings_offered():
    argv = embedded_launch(StudioSettings(), port=8123).argv
    flags = {arg for arg in argv if arg.startswith("--")}
    offered = {"--" + setting.name.replace("_", "-") for setting in EXPOSED}
    assert flags.isdisjoint(offered | {"--no-previews", "--attention-backend"})
    engine = engine_settings(build_parser().parse_args(argv[argv.index("studio.engine") + 1 :]))
    assert all(getattr(engine, name) == EngineSettings.model_fields[name].default for name in SET_AWAY)


# One new engine setting: declared in the engine's settings, and named among the levers the studio offers.
NEW_FIELD = (
    '    grain: int = Field(title="Film grain", default=1, ge=1, le=9, description="grain added to each frame")\n'
)
NEW_LEVER = 'ExposedSetting("grain"), ExposedSetting("previews")'

# Run in a copy of the package with the setting added: the studio's flags (parsed back), the engine's flags, the
# Server tab's form and the launcher, each as the product builds it.
REACHES = """
import argparse, json, gradio as gr
from studio.backend.servers.launchers import embedded_launch
from studio.cli.studio_flags import add_engine_flags, studio_settings
from studio.engine.__main__ import build_parser
from studio.settings import StudioSettings
from studio.ui.server_tab import engine_levers_form
studio_parser = argparse.ArgumentParser()
add_engine_flags(studio_parser)
from_flags = studio_settings(studio_parser.parse_args(["--engine-grain", "5"]))
with gr.Blocks():
    form = engine_levers_form(StudioSettings())
grain = form["engine_grain"]
print(json.dumps({
    "studio_flag": "--engine-grain" in studio_parser.format_help(),
    "engine_flag": "--grain" in build_parser().format_help(),
    "form": [type(grain).__name__, grain.label, grain.value],
    "argv": embedded_launch(from_flags, port=8123).argv,
    "refused": not _ok(lambda: StudioSettings(engine_grain=10)),
}))
"""


def test_one_engine_setting_added_reaches_the_flags_the_form_and_the_launcher(tmp_path):
    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "studio", tmp_path / "studio", ignore=shutil.ignore_patterns("__pycache__"))
    engine = tmp_path / "studio" / "settings" / "engine.py"
    text = engine.read_text()
    anchor = "    guardrails: bool = Field("
    engine.write_text(text.replace(anchor, NEW_FIELD + anchor, 1))
    embedded = tmp_path / "studio" / "settings" / "embedded.py"
    embedded.write_text(embedded.read_text().replace('ExposedSetting("previews")', NEW_LEVER, 1))
    script = (
        "def _ok(make):\n    try:\n        make()\n        return True\n    except Exception:\n        return False\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script + REACHES],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reached = json.loads(done.stdout.strip().splitlines()[-1])
    assert reached["studio_flag"] and reached["engine_flag"]
    assert reached["form"] == ["Number", "Film grain", 1]
    argv = reached["argv"]
    assert argv[argv.index("--grain") + 1] == "5"
    assert reached["refused"]
