"""Which client speaks to the servers of each engine: the vLLM-Omni video API for the studio's own engine,
vLLM-Omni (managed or remote); another contract for the Cosmos Framework's server."""

from __future__ import annotations

from studio.backend.client import VideoClient


def client_class_for(engine: str) -> type[VideoClient]:
    """The client class for `engine`'s servers (one that speaks the vLLM-Omni video API by default)."""
    return VideoClient
