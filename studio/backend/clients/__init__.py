"""Talking to servers: the vLLM-Omni video API client, the Cosmos Framework client, the endpoint pool that routes between them."""
