"""`omni-studio engine`: the embedded engine alone, as `python -m studio.engine` runs it (same flags)."""

from __future__ import annotations

import argparse

from studio.cli.subcommands import Subcommands
from studio.settings import EngineSettings
from studio.settings_flags import add_model_flags


def register(sub: Subcommands) -> None:
    from studio.engine.__main__ import DESCRIPTION

    parser = sub.add_parser(
        "engine", help="run the embedded engine alone (python -m studio.engine)", description=DESCRIPTION
    )
    add_model_flags(parser, EngineSettings)


def run(args: argparse.Namespace) -> int:
    from studio.engine.__main__ import engine_settings, run_engine

    return run_engine(engine_settings(args))
