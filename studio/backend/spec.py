"""What the user asks for in one submit (RunSpec), apart from the machinery that runs it: the CLI checks a
request with this alone, before anything heavy is imported or started. Also how each engine takes the image for
image-to-video (IMAGE_INPUTS), so that the page and the CLI refuse what an engine cannot take before sending it."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from studio import tiers
from studio.protocol import MAX_PROMPT_CHARS, MAX_STEPS, MIN_STEPS, GuidanceScale, InferenceSteps, VideoRequest

# Seeds the studio draws and accepts: 32 bits, which every pipeline's generator takes (the wire allows 63).
MAX_SEED = 2**32 - 1
MAX_CONCURRENCY = 256  # requests of one run in flight at once
MAX_COPIES = 64  # copies of each prompt in one run
# The fields that count something, in the words the page and the CLI use for them: each takes a whole number only.
WHOLE_NUMBER_FIELDS = {
    "copies": "copies per prompt",
    "frames": "frames",
    "steps": "steps",
    "concurrency": "concurrency",
}

# ---- the image for image-to-video ---------------------------------------------------------------------------
MAX_UPLOAD_BYTES = 20 * 2**20
UPLOAD_FORMATS = ("BMP", "JPEG", "PNG", "WEBP")  # Pillow's names of the formats an engine reads as a first frame
# Every engine that takes a URL fetches http(s) ones (vLLM-Omni also data:, the Cosmos Framework server also s3 and
# its own paths): the studio sends only what all of them fetch.
IMAGE_URL_SCHEMES = ("http", "https")
TEXT_TO_VIDEO_ONLY = "the embedded engine's models are text-to-video: it takes no image (neither an upload nor a URL)"
NO_UPLOAD = (
    "the Cosmos Framework server takes no upload: give the image for image-to-video as an http(s) URL it can "
    "fetch (the page's Image URL, or --image-url)"
)


@dataclass(frozen=True)
class ImageInputs:
    """How an engine's contract takes the image for image-to-video: as an upload (a file part of the request), as
    a URL the server fetches, and why not where it takes only one or neither."""

    upload: bool
    url: bool
    why_not: str | None = None


IMAGE_INPUTS = {
    # The engine refuses any reference (studio/engine/api.py).
    "embedded": ImageInputs(upload=False, url=False, why_not=TEXT_TO_VIDEO_ONLY),
    # input_reference (a file part) or image_reference ({"image_url": ...}): docs vllm-omni-video-api.
    "vllm-omni": ImageInputs(upload=True, url=True),
    "remote": ImageInputs(upload=True, url=True),
    # vision_path, a URL or a path on its disk; no upload: docs cosmos-framework-serve-api.
    "cosmos-framework": ImageInputs(upload=False, url=True, why_not=NO_UPLOAD),
}


def image_inputs(engine: str) -> ImageInputs:
    """What `engine` takes; an engine this table does not know speaks the vLLM-Omni video API."""
    return IMAGE_INPUTS.get(engine, IMAGE_INPUTS["vllm-omni"])


def upload_suffixes() -> list[str]:
    from PIL import Image  # here: the CLI imports this module before anything heavy

    return sorted(suffix for suffix, name in Image.registered_extensions().items() if name in UPLOAD_FORMATS)


def check_image_file(path: str | Path | None) -> Path | None:
    """An image file to upload for image-to-video: by its name and by what Pillow reads in it, one of
    UPLOAD_FORMATS, under the size limit. Raises ValueError saying what is wrong."""
    if not path:
        return None
    from PIL import Image, UnidentifiedImageError

    file = Path(path)
    suffixes = upload_suffixes()
    if file.suffix.lower() not in suffixes:
        raise ValueError(f"the upload must be an image ({', '.join(suffixes)}), got {file.name!r}")
    if not file.is_file():
        raise ValueError(f"no image file at {str(file)!r}")
    if file.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"the image is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
    try:
        with Image.open(file, formats=UPLOAD_FORMATS) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"{file.name!r} is not a readable image") from exc
    return file


def _as_number(value: object) -> float | None:
    """A number given as a number (numpy's too) or as text; None where it is neither."""
    try:
        return float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def _whole_number_range(name: str, tier: object) -> tuple[int, int]:
    """The values a counting field of RunSpec takes (frames: for the tier asked, where it is one)."""
    if name == "copies":
        return 1, MAX_COPIES
    if name == "concurrency":
        return 1, MAX_CONCURRENCY
    if name == "steps":
        return MIN_STEPS, MAX_STEPS
    most = tiers.MAX_FRAMES.get(str(tier or "256p"), max(tiers.MAX_FRAMES.values()))
    return tiers.MIN_FRAMES, most


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
    copies: int = Field(default=1, ge=1, le=MAX_COPIES)
    guardrails: bool = True
    concurrency: int = Field(default=1, ge=1, le=MAX_CONCURRENCY)
    model: str | None = None
    extra_params: dict[str, Any] = Field(default_factory=dict)
    input_reference: Path | None = None  # an image for image-to-video, sent as a file upload
    # An image for image-to-video that the server fetches: each request's image_reference, {"image_url": ...}.
    image_url: str | None = None
    generate_sound: bool = False  # sound_duration follows the video: frames / fps

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        """A count given as 1.5 (or "1.5", or "two") is refused in plain words, naming the field and its range,
        rather than rounded; one given as 2.0 (or "2.0") is taken as 2."""
        if not isinstance(data, dict):
            return data
        checked = dict(data)
        for name, words in WHOLE_NUMBER_FIELDS.items():
            value = checked.get(name)
            if value is None or isinstance(value, int):  # None: the default; an int: the bounds check it
                continue
            number = _as_number(value)
            if number is None or not number.is_integer():
                low, high = _whole_number_range(name, checked.get("tier"))
                given = str(value).strip() if number is not None else repr(str(value)[:40])
                raise PydanticCustomError(
                    "whole_number",
                    "{field} must be a whole number from {low} to {high}, got {given}",
                    {"field": words, "low": low, "high": high, "given": given},
                )
            checked[name] = int(number)
        return checked

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

    @field_validator("image_url")
    @classmethod
    def _image_url_is_http(cls, url: str | None) -> str | None:
        """As given (spaces around it dropped; empty: none), if it is an http(s) address with a host."""
        url = (url or "").strip()
        if not url:
            return None
        parts = urlsplit(url)
        if parts.scheme.lower() not in IMAGE_URL_SCHEMES or not parts.netloc or any(ch.isspace() for ch in url):
            raise PydanticCustomError(
                "image_url",
                "must be an http:// or https:// address the server can fetch, got {url}",
                {"url": repr(url[:80])},
            )
        return url

    @model_validator(mode="after")
    def _one_image(self) -> Self:
        if self.input_reference is not None and self.image_url is not None:
            raise PydanticCustomError("image", "give the image as an upload or as a URL, not both")
        return self

    def too_many_requests(self, most: int) -> str | None:
        """Why the run is over the cap of `most` requests (max_run_requests, operators' runs too); None within it.
        Cheap: asked before the run's requests are built."""
        requests = len(self.prompts) * self.copies
        if requests <= most:
            return None
        copies = f"{self.copies} cop{'ies' if self.copies != 1 else 'y'}"
        return (
            f"a run may have at most {most} requests; this one has {requests} ({len(self.prompts)} prompts x "
            f"{copies}): split it into smaller runs, or raise the limit (the setting max_run_requests: "
            "--max-run-requests, or env OMNI_STUDIO_MAX_RUN_REQUESTS)"
        )

    def image_refusal(self, engine: str) -> str | None:
        """Why `engine` cannot take this run's image (None: it can, or there is none)."""
        takes = image_inputs(engine)
        if (self.input_reference is not None and not takes.upload) or (self.image_url is not None and not takes.url):
            return takes.why_not
        return None

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
                        image_reference=json.dumps({"image_url": self.image_url}) if self.image_url else None,
                        generate_sound=True if self.generate_sound else None,
                        sound_duration=round(shape.seconds, 3) if self.generate_sound else None,
                    )
                )
        return requests
