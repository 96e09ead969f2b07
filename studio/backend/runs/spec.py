"""What the user asks for in one submit (RunSpec), apart from the machinery that runs it: the CLI checks a
request with this alone, before anything heavy is imported or started. A RunSpec leaves empty what the user did not
give; `RunSpec.resolved` fills it in for the engine kind and the settings (studio.backend.engine_kinds), once, for
the page, `generate` and `bench` alike. How each engine takes the image for image-to-video is its record's
(`image_inputs`), so that the page and the CLI refuse what an engine cannot take before sending it."""

from __future__ import annotations

import json
import random
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from studio import tiers
from studio.backend.engine_kinds import NO_UPLOAD as NO_UPLOAD
from studio.backend.engine_kinds import TEXT_TO_VIDEO_ONLY as TEXT_TO_VIDEO_ONLY
from studio.backend.engine_kinds import EngineKind, ImageInputs, engine_kind
from studio.backend.runs import image_urls
from studio.backend.runs.image_urls import Resolver
from studio.protocol import (
    DEFAULT_FPS,
    MAX_PROMPT_CHARS,
    MAX_SEED,
    MAX_STEPS,
    MIN_STEPS,
    RANDOM_SEED_BOUND,
    GuidanceScale,
    InferenceSteps,
    Seed,
    VideoRequest,
)

if TYPE_CHECKING:
    from studio.config import StudioSettings

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

# Said to a visitor who asked the guardrail off where the studio's policy keeps it on (visitor_guardrails = forced).
GUARDRAILS_KEPT_ON = (
    "guardrails kept on: in this studio every visitor's request is checked by the guardrail (an operator may let "
    "visitors switch it off: --visitor-guardrails optional)"
)


def image_inputs(engine: StudioSettings | EngineKind | str) -> ImageInputs:
    """How `engine` takes the image for image-to-video (its record's)."""
    return engine_kind(engine).capabilities.image


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


def count_range(name: str, tier: object = None) -> tuple[int, int] | None:
    """The values a counting field of RunSpec takes (frames: for the tier asked, where it is one); None for a field
    that counts nothing."""
    return _whole_number_range(name, tier) if name in WHOLE_NUMBER_FIELDS else None


def _whole_number_range(name: str, tier: object) -> tuple[int, int]:
    """The values a counting field of RunSpec takes (frames: for the tier asked, where it is one)."""
    if name == "copies":
        return 1, MAX_COPIES
    if name == "concurrency":
        return 1, MAX_CONCURRENCY
    if name == "steps":
        return MIN_STEPS, MAX_STEPS
    most = tiers.TIER_MAX_FRAMES.get(str(tier or tiers.DEFAULT_TIER), max(tiers.TIER_MAX_FRAMES.values()))
    return tiers.MIN_FRAMES, most


class SeedPolicy(StrEnum):
    FIXED = "fixed"
    RANDOM = "random"
    INCREMENT = "increment"


class RunSpec(BaseModel):
    """What the user asked for in one submit: prompts x copies at one shape and sampling setting."""

    prompts: list[str] = Field(min_length=1)
    negative_prompt: str | None = None
    tier: tiers.Tier = tiers.DEFAULT_TIER
    aspect: tiers.Aspect = tiers.DEFAULT_ASPECT
    frames: int | None = None
    fps: int | None = None
    steps: InferenceSteps | None = None
    guidance: GuidanceScale | None = None
    flow_shift: float | None = None
    seed: Seed | None = None
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
    bench: bool = False  # a bench's cell or warm-up: History keeps these apart from people's work

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
            tiers.line_aspect(prompt)  # an aspect written before a prompt is one of the tiers' (TierError says why)
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
        problem = image_urls.shape_problem(url)  # credentials, no host, a port that is none: no lookup needed
        if problem is not None:
            raise PydanticCustomError("image_url", "{problem}", {"problem": problem})
        return url

    @model_validator(mode="after")
    def _one_image(self) -> Self:
        if self.input_reference is not None and self.image_url is not None:
            raise PydanticCustomError("image", "give the image as an upload or as a URL, not both")
        return self

    # ---- the guardrail policy (the setting visitor_guardrails) ----
    @property
    def asks_guardrails_off(self) -> bool:
        """The run asks its servers not to check it: guardrails off, or an extra_params key that says so."""
        return not self.guardrails or self.extra_params.get("guardrails", True) is not True

    def with_guardrails_on(self) -> RunSpec:
        """This run with every request checked by the guardrail (a visitor's, where the policy is forced): whatever
        it asked, as the field or as an extra_params key, the servers are not told to skip it."""
        if not self.asks_guardrails_off:
            return self
        extra = {key: value for key, value in self.extra_params.items() if key != "guardrails"}
        return self.model_copy(update={"guardrails": True, "extra_params": extra})

    def guardrails_note(self, ran: RunSpec) -> str | None:
        """What the caller is told where this run asked the guardrail off and `ran` (the run as queued) has it on;
        None otherwise."""
        return GUARDRAILS_KEPT_ON if self.asks_guardrails_off and not ran.asks_guardrails_off else None

    # ---- the image URL ----
    def image_url_refusal(self, allow_private: bool, resolve: Resolver | None = None) -> str | None:
        """Why the servers may not fetch this run's image URL (None: they may, or there is none), in the field's
        words: a URL with credentials, or one whose host is or resolves to an address inside a network (loopback,
        private, link-local, ...; `allow_private`: those are allowed). Resolves the host: call it off the event
        loop (asyncio.to_thread). `resolve`: the resolver (tests give their own). See image_urls for what the check
        can promise and what it cannot (the server resolves the host again when it fetches)."""
        if self.image_url is None:
            return None
        return image_urls.image_url_refusal(self.image_url, allow_private, resolve)

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

    def resolved(self, kind: StudioSettings | EngineKind | str, settings: StudioSettings | None = None) -> RunSpec:
        """This run as the engine `kind` makes it: every field the user left empty (frames, fps, steps, guidance,
        model) filled with the kind's defaults for the tier, where the settings' default_frames, default_steps and
        served_model_name do not say otherwise. The one place those defaults are applied: the controller resolves
        each run of the page and of `generate`, the bench each of its cells. Seeds stay as given: where none is,
        build_requests draws them (below protocol.RANDOM_SEED_BOUND). A resolved run resolves to itself."""
        if settings is None and isinstance(kind, BaseModel):  # the settings, given as the kind's
            settings = kind
        defaults = engine_kind(kind).defaults_for(self.tier, settings)
        given = {
            "frames": (self.frames, defaults.frames),
            "fps": (self.fps, defaults.fps),
            "steps": (self.steps, defaults.steps),
            "guidance": (self.guidance, defaults.guidance),
            "model": (self.model, settings.served_model_name if settings is not None else None),
        }
        return self.model_copy(
            update={name: value if value is not None else default for name, (value, default) in given.items()}
        )

    def check_requests(self) -> None:
        """Raises what the run's requests would: its shape (TierError: tier, frames, fps), then what the wire
        contract limits (ValidationError, e.g. the negative prompt's length), checked on its first request alone:
        every request of a run shares all but its prompt and seed, which RunSpec checks itself."""
        self._request(self.prompts[0], 0, self.shape(self.prompts[0]))

    def image_refusal(self, engine: StudioSettings | EngineKind | str) -> str | None:
        """Why `engine` cannot take this run's image (None: it can, or there is none)."""
        takes = image_inputs(engine)
        if (self.input_reference is not None and not takes.upload) or (self.image_url is not None and not takes.url):
            return takes.why_not
        return None

    def shape(self, prompt: str | None = None) -> tiers.Shape:
        """The run's shape; with `prompt`, that prompt line's (its own aspect where it writes one first)."""
        aspect = (tiers.line_aspect(prompt)[0] if prompt is not None else None) or self.aspect
        return tiers.shape_for(self.tier, aspect, self.frames, self.fps if self.fps is not None else DEFAULT_FPS)

    def aspects(self) -> list[str]:
        """The aspects the run's requests take, in the order their prompts first ask them."""
        return list(dict.fromkeys(tiers.line_aspect(prompt)[0] or self.aspect for prompt in self.prompts))

    def build_requests(self) -> list[VideoRequest]:
        """Every request of the run, in order: each prompt, then its copies. Seeds follow the policy; those drawn
        at random are below protocol.RANDOM_SEED_BOUND."""
        base_seed = self.seed if self.seed is not None else random.randrange(RANDOM_SEED_BOUND)
        requests = []
        for p_index, prompt in enumerate(self.prompts):
            shape = self.shape(prompt)
            for copy in range(self.copies):
                index = p_index * self.copies + copy
                if self.seed_policy is SeedPolicy.RANDOM or (
                    self.seed is None and self.seed_policy is SeedPolicy.FIXED
                ):
                    seed = random.randrange(RANDOM_SEED_BOUND)
                elif self.seed_policy is SeedPolicy.INCREMENT:
                    seed = (base_seed + index) % (MAX_SEED + 1)
                else:
                    seed = base_seed
                requests.append(self._request(prompt, seed, shape))
        return requests

    def _request(self, prompt: str, seed: int, shape: tiers.Shape) -> VideoRequest:
        extra = dict(self.extra_params)
        if not self.guardrails:
            extra["guardrails"] = False
        return VideoRequest(
            prompt=tiers.line_aspect(prompt)[1],
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
