"""The settings are declared once, in groups: every field in exactly one group, each with a title; the CLI's
argument groups and the Server tab's sharing form are made from the groups, so no list of fields is kept by hand."""

from __future__ import annotations

import argparse

import gradio as gr

from studio.backend.controller import SHARING_FIELDS
from studio.backend.servers.autoscale import ScalingPolicy
from studio.cli.studio_flags import add_engine_flags, add_group_flags
from studio.cli.ui import register
from studio.config import ENGINE_GROUPS, SETTINGS_GROUPS, ScalingSettings, SharingSettings, StudioSettings
from studio.ui.server_tab import sharing_form


def test_every_setting_is_in_one_group_with_a_title():
    grouped = [name for group in SETTINGS_GROUPS for name in group.model_fields]
    assert sorted(grouped) == sorted(StudioSettings.model_fields)
    assert len(grouped) == len(set(grouped))
    untitled = [name for name, field in StudioSettings.model_fields.items() if not field.title]
    assert untitled == []


def _ui_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omni-studio")
    register(parser.add_subparsers())
    return parser


def test_the_ui_command_has_an_argument_group_per_settings_group():
    parser = _ui_parser()
    ui = parser._subparsers._group_actions[0].choices["ui"]  # argparse keeps its subcommands there
    titles = [group.title for group in ui._action_groups]
    assert [group.group_title for group in SETTINGS_GROUPS] == [
        t for t in titles if t not in ("positional arguments", "options")
    ]
    dests = {action.dest for action in ui._actions}
    assert set(StudioSettings.model_fields) <= dests


def test_a_group_gives_its_fields_flags_and_the_settings_read_them():
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    add_group_flags(parser, ScalingSettings)
    args = parser.parse_args(["--replicas-min", "1", "--replicas-max", "3", "--scale-in-idle", "5", "--tp", "2"])
    engine_fields = {name for group in ENGINE_GROUPS for name in group.model_fields}
    assert {"tensor_parallel_size", "server_port", "blocklist"} <= engine_fields
    settings = StudioSettings(_env_file=None, **{k: v for k, v in vars(args).items() if v is not None})
    policy = ScalingPolicy.of(settings.part(ScalingSettings))
    assert (policy.min_replicas, policy.max_replicas, policy.idle_s) == (1, 3, 5.0)
    assert settings.tensor_parallel_size == 2


def test_the_sharing_form_and_the_controller_take_the_sharing_group():
    assert tuple(SharingSettings.model_fields) == SHARING_FIELDS
    settings = StudioSettings(_env_file=None, visitor_max_queued=7)
    with gr.Blocks():
        form = sharing_form(settings)
    assert tuple(form) == SHARING_FIELDS
    assert form["visitor_max_queued"].value == 7
    assert form["visitor_max_queued"].label == StudioSettings.model_fields["visitor_max_queued"].title
