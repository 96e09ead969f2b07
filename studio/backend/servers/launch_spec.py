"""The shape every launcher shares: what starts one server (`LaunchSpec`) and how a kind's servers are started and
asked for their flags (`Launcher`). Apart from the launchers themselves so that the engine kinds' records can name
the type without importing the launchers, which look an engine kind up."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from studio.settings import StudioSettings


@dataclass(frozen=True)
class LaunchSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the studio's environment
    secret_env: frozenset[str] = frozenset()  # names whose values must never be logged

    def display(self) -> str:
        """The command as it may be shown: secrets are only ever in env, which is not shown."""
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Launcher:
    """How the studio starts one kind's servers, and asks the installed server for its flags."""

    launch: Callable[[StudioSettings, int, str], LaunchSpec]  # (settings, port, host)
    help_command: Callable[[StudioSettings], list[str]]
    # The server's parser reads --max_model_len as --max-model-len, and --a.b as a key of --a (vLLM's).
    loose_flags: bool
