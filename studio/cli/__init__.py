"""`omni-studio ui | generate | bench | plan | engine | doctor | keys`.

One module per command, each with `register(subparsers)` and `run(args) -> int`. Flags are built from the
settings' fields (studio/settings_flags.py); each command imports its heavy parts inside `run`, so `--help`, a bad
flag and a bad request answer at once, and `generate` starts its engine before the rest of the studio loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import ModuleType

from pydantic import ValidationError

from studio.cli.exits import EXIT_USAGE, fail
from studio.settings_flags import validation_text
from studio.startup import private_files


def _commands() -> dict[str, ModuleType]:
    from studio.cli import bench, doctor, engine, generate, keys, plan, ui

    return {
        "ui": ui,
        "generate": generate,
        "bench": bench,
        "plan": plan,
        "engine": engine,
        "doctor": doctor,
        "keys": keys,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omni-studio", description="Video generation studio for vLLM-Omni")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _commands().values():
        command.register(sub)
    return parser


def exit_on_sigterm() -> None:
    """SIGTERM ends the process without unwinding by default; turn it into SystemExit so that `finally`
    blocks and atexit hooks stop the servers this process started."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    exit_on_sigterm()
    private_files()  # before anything is written: the outputs are 0600 in 0700 folders, the engine's files too
    try:
        code = _commands()[args.command].run(args)
        sys.stdout.flush()  # here, where a reader that went away is caught, not at the interpreter's exit
        return code
    except ValidationError as exc:
        return fail(validation_text(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`omni-studio doctor --json | head`): the rest of the output goes nowhere, quietly,
        # and Python's own flush at exit must not fail on the closed pipe either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
