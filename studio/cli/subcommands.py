"""What every command module is given to add its parser to."""

from __future__ import annotations

import argparse
from typing import Any, Protocol


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers` returns: where each command adds its parser."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...
