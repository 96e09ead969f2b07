"""The vLLM-Omni levers: typed settings that reach `vllm serve --omni` only when set, under vLLM-Omni's own flag
names; the command line and the Server view's form that set them; and which of them the view shows, decided from
the installed server's help (here a stand-in's; the real server's in tests/vllm_omni/test_levers.py)."""

from __future__ import annotations

import argparse
import stat
import sys

import gradio as gr
import pytest
from pydantic import ValidationError

from studio.backend.bench.variants import help_flags
from studio.backend.servers.launchers import (
    LEVER_FLAGS,
    LaunchError,
    check_parallelism,
    embedded_launch,
    levers_missing,
    vllm_omni_launch,
    world_size,
)
from studio.cli import build_parser
from studio.cli.studio_flags import studio_settings
from studio.config import StudioSettings
from studio.ui.server_tab import (
    LEVER_CHOICES,
    lever_visibility,
    levers_for_engine,
    read_lever_flags,
    settings_form,
    settings_values,
)

# Each lever set to a value other than its default, and the flag and value `vllm serve` then gets.
SET_LEVERS = {
    "cfg_parallel_size": (2, ["--cfg-parallel-size", "2"]),
    "ulysses_degree": (4, ["--ulysses-degree", "4"]),
    "ring_degree": (2, ["--ring-degree", "2"]),
    "cache_backend": ("tea_cache", ["--cache-backend", "tea_cache"]),
    "quantization": ("fp8", ["--quantization", "fp8"]),
    "diffusion_attention_backend": ("FLASH_ATTN", ["--diffusion-attention-backend", "FLASH_ATTN"]),
    "enforce_eager": (True, ["--enforce-eager"]),
    "vae_tiling": (True, ["--vae-use-tiling"]),
    "guardrails": (False, ["--no-guardrails"]),
}
# Flags that only a lever set away from its default adds.
OPTIONAL_FLAGS = [flags[0] for _, flags in SET_LEVERS.values()]


@pytest.fixture
def fake_vllm(tmp_path):
    """An executable file named vllm: the launcher only needs it to exist; it is never run here."""
    exe = tmp_path / "venv" / "bin" / "vllm"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def vllm(fake_vllm, **values) -> StudioSettings:
    return StudioSettings(_env_file=None, engine="vllm-omni", model="m", vllm_executable=str(fake_vllm), **values)


def serve_argv(settings: StudioSettings) -> list[str]:
    return vllm_omni_launch(settings, port=9000).argv


def test_unset_levers_leave_the_servers_own_defaults(fake_vllm):
    argv = serve_argv(vllm(fake_vllm))
    assert not set(OPTIONAL_FLAGS) & set(argv), argv
    # Tensor parallel and the init timeout are always given: the studio plans GPUs and waits by them.
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--init-timeout") + 1] == "1800"


@pytest.mark.parametrize("name", list(SET_LEVERS))
def test_a_set_lever_reaches_vllm_serve_under_its_own_flag(fake_vllm, name):
    value, flags = SET_LEVERS[name]
    argv = serve_argv(vllm(fake_vllm, **{name: value}))
    at = argv.index(flags[0])
    assert argv[at : at + len(flags)] == flags
    assert not (set(OPTIONAL_FLAGS) - {flags[0]}) & set(argv), "only the lever that was set is passed"
    assert LEVER_FLAGS[name] == flags[0]


def test_every_lever_set_at_once_and_the_extra_args_after_them(fake_vllm):
    values = {name: value for name, (value, _) in SET_LEVERS.items()}
    argv = serve_argv(vllm(fake_vllm, **values, init_timeout_s=900, extra_serve_args="--cache-backend cache_dit"))
    for _, flags in SET_LEVERS.values():
        at = argv.index(flags[0])
        assert argv[at : at + len(flags)] == flags
    assert argv[argv.index("--init-timeout") + 1] == "900"
    # Extra args stay, last: where they repeat a lever's flag the server takes theirs.
    assert argv[-2:] == ["--cache-backend", "cache_dit"]


@pytest.mark.parametrize(
    ("name", "word"),
    [("cache_backend", "off"), ("quantization", "none"), ("diffusion_attention_backend", "auto"), ("quantization", "")],
)
def test_words_for_the_servers_default_pass_nothing(fake_vllm, name, word):
    settings = vllm(fake_vllm, **{name: word})
    assert getattr(settings, name) is None
    assert LEVER_FLAGS[name] not in serve_argv(settings)


@pytest.mark.parametrize("value", ["--host", "tea cache", "x;rm", "-q"])
def test_a_lever_value_that_is_not_a_name_is_refused(value):
    with pytest.raises(ValidationError, match="cache_backend"):
        StudioSettings(_env_file=None, cache_backend=value)


def test_the_embedded_engine_gets_cfg_and_ulysses_and_ignores_the_rest():
    values = {name: value for name, (value, _) in SET_LEVERS.items() if name != "guardrails"}
    argv = embedded_launch(StudioSettings(_env_file=None, **values), port=9000).argv
    assert argv[argv.index("--cfg-parallel-size") + 1] == "2"
    assert argv[argv.index("--ulysses-degree") + 1] == "4"
    for name in ("ring_degree", "cache_backend", "quantization", "diffusion_attention_backend", "enforce_eager"):
        assert LEVER_FLAGS[name] not in argv
    assert "--vae-use-tiling" not in argv


def test_ring_degree_widens_a_vllm_omni_replica_only(fake_vllm):
    assert world_size(vllm(fake_vllm, tensor_parallel_size=2, ring_degree=2)) == 4
    assert world_size(StudioSettings(_env_file=None, ulysses_degree=2, ring_degree=2)) == 2  # embedded: no ring
    with pytest.raises(LaunchError, match="x ring 4 needs 4 GPUs, but --gpus 0,1 give 2"):
        check_parallelism(vllm(fake_vllm, ring_degree=4), ["0", "1"])


def test_the_ui_command_takes_every_lever():
    args = build_parser().parse_args(
        [
            "ui",
            "--engine",
            "vllm-omni",
            "--ring-degree",
            "2",
            "--cache-backend",
            "tea_cache",
            "--quantization",
            "fp8",
            "--diffusion-attention-backend",
            "SAGE_ATTN",
            "--enforce-eager",
            "--vae-tiling",
            "--init-timeout",
            "1200",
            "--no-server-guardrails",
        ]
    )
    settings = studio_settings(args)
    assert (settings.ring_degree, settings.cache_backend, settings.quantization) == (2, "tea_cache", "fp8")
    assert settings.diffusion_attention_backend == "SAGE_ATTN"
    assert settings.enforce_eager and settings.vae_tiling and not settings.guardrails
    assert settings.init_timeout_s == 1200
    untouched = studio_settings(build_parser().parse_args(["ui"]))
    assert untouched.cache_backend is None and untouched.ring_degree is None and not untouched.enforce_eager


def test_the_form_sets_and_unsets_levers():
    current = StudioSettings(_env_file=None, ring_degree=2, cache_backend="tea_cache", quantization="fp8")
    form = {
        "ring_degree": None,  # cleared: the server's default again
        "cache_backend": "off",  # the dropdown's first choice
        "quantization": "fp8",
        "diffusion_attention_backend": "TRTLLM_ATTN",  # typed in: not among the usual choices
        "enforce_eager": True,
        "vae_tiling": False,
        "tensor_parallel_size": None,  # blank: kept
        "init_timeout_s": 2400,
        "guardrails": False,
    }
    values = StudioSettings.model_validate(settings_values(current, form))
    assert values.ring_degree is None and values.cache_backend is None and values.quantization == "fp8"
    assert values.diffusion_attention_backend == "TRTLLM_ATTN"
    assert values.enforce_eager and not values.vae_tiling and not values.guardrails
    assert values.tensor_parallel_size == 1 and values.init_timeout_s == 2400


def test_the_form_has_a_control_for_every_lever_with_the_current_value():
    settings = StudioSettings(_env_file=None, cache_backend="my_cache", enforce_eager=True)
    with gr.Blocks():
        form = settings_form(settings, gr.Markdown(render=False))
    assert set(LEVER_FLAGS) <= set(form)
    # Each control is labelled with its setting's title, the words the settings declare once.
    assert all(form[name].label == StudioSettings.model_fields[name].title for name in LEVER_FLAGS)
    cache = form["cache_backend"]
    assert cache.value == "my_cache" and [c[1] for c in cache.choices][:3] == ["off", "tea_cache", "cache_dit"]
    assert ("my_cache", "my_cache") in cache.choices  # a value the usual choices lack is kept
    assert form["quantization"].value == LEVER_CHOICES["quantization"] == "off"
    assert form["enforce_eager"].value is True and form["ring_degree"].value is None


def help_of(*flags: str) -> str:
    """An argparse help listing these options, as a server prints it."""
    parser = argparse.ArgumentParser(prog="vllm serve")
    for flag in flags:
        parser.add_argument(flag, action="store_true" if flag.startswith("--no-") else "store")
    return parser.format_help()


def test_levers_whose_flag_the_help_lacks_are_hidden_by_name():
    present = [flag for name, flag in LEVER_FLAGS.items() if name not in ("ring_degree", "vae_tiling")]
    flags = help_flags(help_of(*present, "--vae-use-slicing", "--ring-attn-x"))
    assert levers_missing(flags) == ["ring_degree", "vae_tiling"]
    shown, note = lever_visibility(flags)
    assert [name for name, visible in shown.items() if not visible] == ["ring_degree", "vae_tiling"]
    assert "Ring degree (--ring-degree)" in note and "VAE tiling (--vae-use-tiling)" in note


def test_every_lever_shows_when_the_help_has_them_all_or_cannot_be_read():
    shown, note = lever_visibility(help_flags(help_of(*LEVER_FLAGS.values())))
    assert all(shown.values()) and note == "Every lever's flag is in the installed vLLM-Omni."
    shown, note = lever_visibility(None, "the `vllm` executable was not found")
    assert all(shown.values()) and set(shown) == set(LEVER_FLAGS)
    assert note.startswith("All levers shown") and "the `vllm` executable was not found" in note


STAND_IN_VLLM = """#!{python}
# A stand-in for vLLM-Omni's `vllm` (the real one is tested in tests/vllm_omni): its help, without ring attention.
import argparse, sys
assert sys.argv[1:] == ["serve", "--omni", "--help=all"], sys.argv
parser = argparse.ArgumentParser(prog="vllm serve")
for flag in {flags!r}:
    parser.add_argument(flag)
parser.print_help()
"""


def test_the_flags_are_read_from_the_installed_servers_help_whatever_the_engine(tmp_path):
    exe = tmp_path / "vllm"
    flags = [flag for flag in LEVER_FLAGS.values() if flag != "--ring-degree"]
    exe.write_text(STAND_IN_VLLM.format(python=sys.executable, flags=flags))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    # The studio runs its embedded engine: the levers are still vLLM-Omni's, so its help is the one read.
    found, why = read_lever_flags(StudioSettings(_env_file=None, engine="embedded", vllm_executable=str(exe)))
    assert why == "" and found is not None
    assert levers_missing(found) == ["ring_degree"]


def test_a_server_that_cannot_be_found_shows_every_lever_and_says_why(tmp_path):
    found, why = read_lever_flags(StudioSettings(_env_file=None, vllm_executable=str(tmp_path / "no-vllm")))
    assert found is None and "was not found" in why
    shown, note = lever_visibility(found, why)
    assert all(shown.values()) and "was not found" in note


def test_on_the_embedded_engine_only_its_own_levers_show_and_the_note_says_why():
    shown, note = levers_for_engine(StudioSettings(_env_file=None))
    assert {name for name, visible in shown.items() if visible} == {
        "cfg_parallel_size",
        "ulysses_degree",
        "guardrails",
        "init_timeout_s",
    }
    assert "embedded engine reads CFG parallel, Ulysses degree" in note and "vllm-omni engine" in note
    with gr.Blocks():
        form = settings_form(StudioSettings(_env_file=None), gr.Markdown(render=False))
    group = form["cfg_parallel_size"].parent
    while not isinstance(group, gr.Accordion):
        group = group.parent
    assert group.open is False  # the levers group starts folded


def test_remote_servers_take_no_lever_and_vllm_omni_reads_its_own_help():
    shown, note = levers_for_engine(StudioSettings(_env_file=None, engine="remote", remote_urls=["http://h:1"]))
    assert not any(shown.values()) and note.startswith("No lever applies")
    assert levers_for_engine(StudioSettings(_env_file=None, engine="vllm-omni")) is None
