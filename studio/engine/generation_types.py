"""What one generation takes and gives: its parameters, its output, a request's place in a batch, and the
errors that end one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from studio.engine.resize import RESIZE_CHUNK, resize_frames, resized_chunks
from studio.engine.step_cache import StepCachePolicy

if TYPE_CHECKING:
    from studio.engine.previews import PreviewTarget


class GenerationCancelled(Exception):
    """Raised from the step callback: unwinds the denoising loop at once, skipping the VAE decode."""


class DecodeSkipped(Exception):
    """The answer for a warm-up item whose decode was not asked for (its decode shape was warmed before)."""


class ModelLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class GenerationParams:
    prompt: str
    width: int
    height: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    seed: int
    negative_prompt: str | None = None
    flow_shift: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    step_cache: StepCachePolicy = field(default_factory=StepCachePolicy)  # off: every step computed


@dataclass
class GenerationOutput:
    made: np.ndarray  # uint8 (T, h, w, 3) as the model made them: at `native_size`, resized only as they are read
    size: tuple[int, int]  # (width, height) asked for
    native_size: tuple[int, int]  # (width, height) the model made before any resize
    inference_time_s: float
    stage_durations: dict[str, float]
    peak_memory_mb: float | None
    batch_size: int = 1

    @property
    def resized(self) -> bool:
        """Whether the frames were made at another size than the one asked for (and are resized as they are read)."""
        return (self.made.shape[2], self.made.shape[1]) != self.size

    def chunks(self, frames_per_chunk: int = RESIZE_CHUNK) -> Iterator[np.ndarray]:
        """The video's uint8 frames at the requested size, a few at a time in order: what the encoder reads, so
        that a long clip at a large size is never in memory whole."""
        if not self.resized:
            yield self.made
            return
        yield from resized_chunks(self.made, *self.size, frames_per_chunk)

    @property
    def frames(self) -> np.ndarray:
        """All of the video's uint8 frames (T, H, W, 3) at the requested size, made whole on each read."""
        return resize_frames(self.made, *self.size) if self.resized else self.made


@dataclass
class BatchItem:
    """One request of a batch: its parameters, its progress callback and its own cancel flag."""

    params: GenerationParams
    on_step: Callable[[int, int], None] | None = None
    should_stop: Callable[[], bool] | None = None
    # Given the video's uint8 frames (t, H, W, 3) at the requested size, a few at a time as the VAE decodes them
    # (the engine's own loop only), so that encoding can run beside the decode. The result still has them all.
    on_frames: Callable[[np.ndarray], None] | None = None
    # False: its latents are not decoded (answered DecodeSkipped), where every item of its decode call says so.
    decode: bool = True
    # Its previews: when one is due and where it goes; None: it gets none.
    preview: PreviewTarget | None = None

    def stopped(self) -> bool:
        return self.should_stop is not None and self.should_stop()


# Called once per item of a batch, as soon as that item is finished: its output, or the exception that ended
# it (GenerationCancelled for a cancelled one).
ResultCallback = Callable[[int, "GenerationOutput | BaseException"], None]
