"""What the user asks for in one submit (RunSpec), apart from the machinery that runs it: the CLI checks a
request with this alone, before anything heavy is imported or started."""

from __future__ import annotations

import random
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from studio import tiers
from studio.protocol import MAX_PROMPT_CHARS, GuidanceScale, InferenceSteps, VideoRequest

# Seeds the studio draws and accepts: 32 bits, which every pipeline's generator takes (the wire allows 63).
MAX_SEED = 2**32 - 1
MAX_CONCURRENCY = 256  # requests of one run in flight at once


class SeedPolicy(StrEnum):
    FIXED = "fixed"
    RANDOM = "random"
    INCREMENT = "increment"


class RunSpec(BaseModel):
    """What the user asked for in one submit: prompts x copies at one shape and sampling setting."""

    prompts: list[str] = Field(min_length=1)
    negative_prompt: str | None = None
    tier: str = "256p"
    aspect: str = "16:9"
    frames: int | None = None
    fps: int = tiers.DEFAULT_FPS
    steps: InferenceSteps | None = None
    guidance: GuidanceScale | None = None
    flow_shift: float | None = None
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    seed_policy: SeedPolicy = SeedPolicy.FIXED
    copies: int = Field(default=1, ge=1, le=64)
    guardrails: bool = True
    concurrency: int = Field(default=1, ge=1, le=MAX_CONCURRENCY)
    model: str | None = None
    extra_params: dict[str, Any] = Field(default_factory=dict)
    input_reference: Path | None = None  # an image for image-to-video, sent as a file upload
    generate_sound: bool = False  # sound_duration follows the video: frames / fps

    @field_validator("prompts")
    @classmethod
    def _clean_prompts(cls, prompts: list[str]) -> list[str]:
        cleaned = [p.strip() for p in prompts if p and p.strip()]
        if not cleaned:
            raise ValueError("write at least one prompt")
        for prompt in cleaned:
            if "\x00" in prompt:
                raise ValueError("a prompt may not contain NUL characters")
            if len(prompt) > MAX_PROMPT_CHARS:
                raise ValueError(f"a prompt may have at most {MAX_PROMPT_CHARS} characters, got {len(prompt)}")
        return cleaned

    def shape(self) -> tiers.Shape:
        return tiers.shape_for(self.tier, self.aspect, self.frames, self.fps)

    def build_requests(self) -> list[VideoRequest]:
        """Every request of the run, in order: each prompt, then its copies. Seeds follow the policy."""
        shape = self.shape()
        base_seed = self.seed if self.seed is not None else random.randint(0, MAX_SEED)
        extra = dict(self.extra_params)
        if not self.guardrails:
            extra["guardrails"] = False
        requests = []
        for p_index, prompt in enumerate(self.prompts):
            for copy in range(self.copies):
                index = p_index * self.copies + copy
                if self.seed_policy is SeedPolicy.RANDOM or (
                    self.seed is None and self.seed_policy is SeedPolicy.FIXED
                ):
                    seed = random.randint(0, MAX_SEED)
                elif self.seed_policy is SeedPolicy.INCREMENT:
                    seed = (base_seed + index) % (MAX_SEED + 1)
                else:
                    seed = base_seed
                requests.append(
                    VideoRequest(
                        prompt=prompt,
                        negative_prompt=self.negative_prompt or None,
                        model=self.model,
                        width=shape.width,
                        height=shape.height,
                        num_frames=shape.num_frames,
                        fps=shape.fps,
                        num_inference_steps=self.steps,
                        guidance_scale=self.guidance,
                        flow_shift=self.flow_shift,
                        seed=seed,
                        extra_params=extra,
                        input_reference=self.input_reference,
                        generate_sound=True if self.generate_sound else None,
                        sound_duration=round(shape.seconds, 3) if self.generate_sound else None,
                    )
                )
        return requests
