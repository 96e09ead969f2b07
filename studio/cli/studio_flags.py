"""The StudioSettings flags that the commands share, a group of settings at a time, and the settings they give."""

from __future__ import annotations

import argparse

from pydantic import BaseModel

from studio.settings import ENGINE_GROUPS, StudioSettings, load_settings
from studio.settings_flags import ArgumentContainer, add_model_flags, model_values


def add_group_flags(parser: argparse.ArgumentParser, group: type[BaseModel]) -> None:
    """Every field of a settings group (studio.settings.SETTINGS_GROUPS), as an argument group of its title: the
    fields StudioSettings is made of, so that studio_settings reads them back."""
    add_model_flags(parser.add_argument_group(group.group_title, description=group.__doc__), group)


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Which engine makes the videos and how a managed one is started: what `ui`, `generate` and `bench` share."""
    for group in ENGINE_GROUPS:
        add_group_flags(parser, group)


def add_studio_flags(parser: ArgumentContainer, names: tuple[str, ...]) -> None:
    add_model_flags(parser, StudioSettings, names)


def studio_settings(args: argparse.Namespace) -> StudioSettings:
    """Flags over env over `.env` over defaults."""
    return load_settings(**model_values(args, StudioSettings))
