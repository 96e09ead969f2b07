"""Where a request comes from: the peer's own address, or what a proxy the operator trusts says of it.

uvicorn (which Gradio starts) rewrites each request's `scope["client"]` from `X-Forwarded-For` when the peer is one
of the proxies it trusts, reading the header from the right and taking the first address that is not a trusted
proxy: an entry a client wrote itself ahead of the proxy's is never believed. By default uvicorn trusts 127.0.0.1
and ::1 (FORWARDED_ALLOW_IPS), so that any program on the studio's machine, or a tunnel ending there, could name any
address it liked. The studio makes uvicorn trust exactly the operator's list (--forwarded-allow-ips, default none),
and then reads the address from `scope["client"]` only, the same one Gradio's `request.client` gives: every limit
by address (sign-in guesses, guests' shared quota) sees one trusted address.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, MutableMapping

from starlette.types import Scope

# uvicorn's own variable: read when its Config is made (Gradio makes one at launch, without proxy settings).
FORWARDED_ALLOW_IPS = "FORWARDED_ALLOW_IPS"
UNKNOWN = "unknown"
ADDRESS_CHARS = 64  # an IPv6 address with a zone fits; anything longer is no address


def _printable(text: str) -> str:
    cleaned = "".join(ch if ch.isprintable() and not ch.isspace() else "?" for ch in text)
    return cleaned[:ADDRESS_CHARS]


def client_address(scope: Scope | Mapping) -> str:
    """The request's client address as uvicorn left it (the peer, or what a trusted proxy said); never a header."""
    client = scope.get("client")
    return _printable(str(client[0])) if client and client[0] else UNKNOWN


def request_address(request: object | None) -> str:
    """The same for a Gradio event's request (gr.Request, whose `client` is the starlette request's)."""
    client = getattr(request, "client", None) if request is not None else None
    host = getattr(client, "host", None)
    return _printable(str(host)) if host else UNKNOWN


def trust_forwarded_from(proxies: Iterable[str], environ: MutableMapping[str, str] = os.environ) -> str:
    """Make the uvicorn that Gradio starts next trust `X-Forwarded-For` from exactly `proxies` (addresses or
    networks; '*' every peer). An empty list is written as an empty value, which uvicorn 0.55 reads as a list of
    one empty name that matches no peer: no proxy is trusted, and the peer's own address counts. Call it before
    launch(). Returns the value set."""
    value = ",".join(proxy.strip() for proxy in proxies if proxy.strip())
    environ[FORWARDED_ALLOW_IPS] = value
    return value
