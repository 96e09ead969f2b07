"""Where the project's own files are: its root, its assets, the models it ships and the guardrail's blocklist."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
ASSETS_DIR = PROJECT_ROOT / "assets"
# The project's own small text-to-video model (trained on procedural scenes; follows prompts of its grammar).
SMALL_MODEL_DIR = ASSETS_DIR / "omni-small-t2v"
# A tiny Wan pipeline with random weights: the same architecture as real Wan models (the GPU batching path and
# the vLLM-Omni server run it), but it makes noise.
TINY_WAN_DIR = ASSETS_DIR / "tiny-wan"
DEFAULT_MODEL_DIR = SMALL_MODEL_DIR
DEFAULT_BLOCKLIST = ASSETS_DIR / "guardrail_blocklist.txt"
