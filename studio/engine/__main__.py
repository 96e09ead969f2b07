"""`python -m studio.engine`: the embedded engine alone (`omni-studio engine` is the same, with the same flags).

The flags are EngineSettings' fields (`--help` lists them). The heavy imports wait until the flags are parsed, so
`--help` and a bad flag answer at once.
"""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError

from studio.settings import EngineSettings
from studio.settings_flags import add_model_flags, model_values, validation_text
from studio.startup import collector_paused, private_files

DESCRIPTION = "The embedded engine: the vLLM-Omni video API over a diffusers pipeline."
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m studio.engine", description=DESCRIPTION)
    add_model_flags(parser, EngineSettings)
    return parser


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """Flags over env (OMNI_STUDIO_ENGINE_*, VLLM_API_KEY) over defaults."""
    return EngineSettings(**model_values(args, EngineSettings))


def run_engine(settings: EngineSettings) -> int:
    private_files()  # its videos and logs are its callers' work: 0600 (a studio's engine inherits this already)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    log = logging.getLogger("studio.engine")
    if settings.host not in LOOPBACK_HOSTS and settings.api_key is None:
        log.warning("binding %s without an API key: anyone who can reach it can use it", settings.host)
    # The cyclic garbage collector stays off while torch, diffusers and the model load: they make millions of
    # objects and almost no garbage, and its passes over them were a sixth of the start-up. serve_engine freezes
    # what start-up made out of later passes and turns the collector back on before serving.
    with collector_paused():
        from studio.engine.serve import serve_engine

        return serve_engine(settings, log)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = engine_settings(args)
    except ValidationError as exc:
        parser.error(validation_text(exc))
    return run_engine(settings)


if __name__ == "__main__":
    raise SystemExit(main())
