"""Which client speaks to the servers of each engine: the vLLM-Omni video API for the studio's own engine,
vLLM-Omni (managed or remote); another contract for the Cosmos Framework's server."""

from __future__ import annotations

from studio.backend.client import VideoClient
from studio.backend.cosmos_framework_client import ENGINE as COSMOS_FRAMEWORK
from studio.backend.cosmos_framework_client import CosmosFrameworkClient

# Engines whose servers run already and are given by --url (the studio starts none of them).
URL_ENGINES = ("remote", COSMOS_FRAMEWORK)


def client_class_for(engine: str) -> type[VideoClient] | type[CosmosFrameworkClient]:
    """The client class for `engine`'s servers (one that speaks the vLLM-Omni video API by default)."""
    return CosmosFrameworkClient if engine == COSMOS_FRAMEWORK else VideoClient
