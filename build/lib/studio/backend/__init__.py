"""Talks to video servers: the wire contract, the client, managed servers, runs and storage.

Nothing here imports gradio: the page and the CLI both build on these parts.
"""
