"""The studio as a gateway for programs: vLLM-Omni's video API (/v1/videos) on the studio's own port, each caller
the visitor its API key names, each video one request of the studio's own (docs/gateway.md)."""
