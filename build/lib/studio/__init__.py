"""Omni Studio: a web studio for production video generation on vLLM-Omni."""

__version__ = "0.1.0"
