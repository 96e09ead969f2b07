"""How a command says it failed: exit statuses and the one error line on stderr."""

from __future__ import annotations

import sys

EXIT_FAILED = 1
EXIT_USAGE = 2  # a flag or a request that cannot be used; argparse uses the same status


def fail(message: str, code: int) -> int:
    print(f"omni-studio: error: {message}", file=sys.stderr, flush=True)
    return code
