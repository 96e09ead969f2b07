"""`omni-studio ui | generate | bench | engine | doctor`.

One module per command, each with `register(subparsers)` and `run(args) -> int`. Flags are built from the
settings' fields (flags.py); each command imports its heavy parts inside `run`, so `--help`, a bad flag and a
bad request answer at once, and `generate` starts its engine before the rest of the studio loads.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import ModuleType

from pydantic import ValidationError

from studio.cli.exits import EXIT_USAGE, fail, validation_text


def _commands() -> dict[str, ModuleType]:
    from studio.cli import bench, doctor, engine, generate, ui

    return {"ui": ui, "generate": generate, "bench": bench, "engine": engine, "doctor": doctor}


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
    try:
        return _commands()[args.command].run(args)
    except ValidationError as exc:
        return fail(validation_text(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
