"""The embedded engine: a server that speaks the vLLM-Omni video API over a diffusers pipeline.

It imports nothing of the studio's UI, so it runs alone (`python -m studio.engine`).
"""
