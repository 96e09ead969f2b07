"""`omni-studio ui`: the web studio."""

from __future__ import annotations

import argparse

from studio.cli.studio_flags import add_engine_flags, add_group_flags, studio_settings
from studio.cli.subcommands import Subcommands
from studio.config import ENGINE_GROUPS, SETTINGS_GROUPS


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("ui", help="start the web studio", description="The web studio on its engine.")
    add_engine_flags(parser)
    for group in SETTINGS_GROUPS[len(ENGINE_GROUPS) :]:  # the fleet, its scaling, sharing, the page, who is who
        add_group_flags(parser, group)


def run(args: argparse.Namespace) -> int:
    from studio.startup import collector_paused

    settings = studio_settings(args)
    with collector_paused():
        from studio.ui.launch import launch_ui

    return launch_ui(settings)
