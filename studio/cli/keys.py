"""`omni-studio keys add USER --api-key-file FILE`: a new API key for the studio's /v1/videos API (docs/gateway.md).

The key is printed once, on stdout, and kept nowhere: the file gets its SHA-256 alone (`USER:sha256:HEX`), made
its owner's alone (0600) where it is new. A running studio reads the file again when it changes.
"""

from __future__ import annotations

import argparse
import sys

from studio.cli.exits import EXIT_USAGE, fail
from studio.cli.studio_flags import add_studio_flags, studio_settings
from studio.cli.subcommands import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "keys",
        help="make an API key for a program that calls the studio's /v1/videos API",
        description="Adds a new random key for USER to the key file the studio reads (--api-key-file) and prints "
        "it once. The file keeps the key's SHA-256 only. USER is the account of that name where the studio has "
        "accounts (--auth), so a program and its user's page share one History and one quota.",
    )
    parser.add_argument("action", choices=["add"], help="add: make a new key")
    parser.add_argument("user", metavar="USER", help="whose key it is: one word, without a colon")
    # The setting's own flag (and env OMNI_STUDIO_API_KEY_FILE), as `omni-studio ui` reads it.
    add_studio_flags(parser, ("api_key_file",))


def run(args: argparse.Namespace) -> int:
    from studio.gateway.keys import KeyFileError, add_key

    path = studio_settings(args).api_key_file
    if path is None:
        return fail("name the key file: --api-key-file FILE (the one `omni-studio ui` is given)", EXIT_USAGE)
    try:
        key = add_key(path, args.user)
    except (KeyFileError, OSError) as exc:
        return fail(str(exc), EXIT_USAGE)
    print(key, flush=True)
    print(
        f"omni-studio: a key for {args.user} is added to {path}; it is shown only now. Send it as "
        "Authorization: Bearer KEY (openai SDK: api_key=KEY).",
        file=sys.stderr,
    )
    return 0
