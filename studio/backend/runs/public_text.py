"""What a visitor may read of a server's words: an error as the studio and its servers say it names the server's
address ("cannot reach http://10.0.3.7:8001: ...") and, after a crash, log lines with paths on the studio's machine.
Operators read them whole; a visitor reads them with every URL's address and every absolute path put in words."""

from __future__ import annotations

import re

_URL = re.compile(r"\b(?:https?|wss?)://[^\s'\"<>)\]]*[^\s'\"<>)\].,:;]", re.IGNORECASE)  # not its last stop
# An absolute path of two parts or more (a lone "/" or "/s" in prose is no path), not the tail of a URL.
_PATH = re.compile(r"(?<![\w:/.~-])/(?:[\w.~+-]+/)+[\w.~+-]*")
SERVER = "the server"
PATH = "a file on the studio's machine"


def for_visitors(text: str | None) -> str | None:
    """`text` with no server address or path on the studio's machine left in it (None stays None)."""
    if not text:
        return text
    return _PATH.sub(PATH, _URL.sub(SERVER, text))
