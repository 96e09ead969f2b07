"""Omni Studio's own small text-to-video model: a prompt grammar with exact ground truth, a procedural clip
generator, a small pixel-space field denoiser with a bag-of-words text encoder, and the diffusers pipeline around them.

Importing this package registers `OmniSmallT2VPipeline` with diffusers, so that
`DiffusionPipeline.from_pretrained(dir)` resolves the `_class_name` in the model's model_index.json
(diffusers looks pipeline classes up on its own module).
"""

from __future__ import annotations

import diffusers

from studio.smallmodel.field import OmniFieldDenoiser
from studio.smallmodel.pipeline import OmniSmallT2VPipeline, OmniSmallT2VPipelineOutput, build_pipeline
from studio.smallmodel.text import OmniTextEncoder

__all__ = [
    "OmniFieldDenoiser",
    "OmniSmallT2VPipeline",
    "OmniSmallT2VPipelineOutput",
    "OmniTextEncoder",
    "build_pipeline",
    "register_with_diffusers",
]


def register_with_diffusers() -> None:
    """Make `diffusers.OmniSmallT2VPipeline` resolvable (idempotent)."""
    if getattr(diffusers, OmniSmallT2VPipeline.__name__, None) is not OmniSmallT2VPipeline:
        setattr(diffusers, OmniSmallT2VPipeline.__name__, OmniSmallT2VPipeline)


register_with_diffusers()
