"""Plain HTTP clients for the studio's side calls: health checks, /metrics scrapes, readiness polls.

Building an httpx client builds a TLS context, which loads the whole CA bundle: tens of milliseconds of CPU. These
calls run every second or two per endpoint, so they share one context; the client itself stays short-lived, which
keeps it free of any event loop.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verification context, built once per process."""
    return httpx.create_ssl_context()


def async_client(timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout_s, verify=tls_context())


def sync_client(timeout_s: float) -> httpx.Client:
    return httpx.Client(timeout=timeout_s, verify=tls_context())
