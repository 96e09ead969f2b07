"""A job's previews: small images of what its video looks like while it is denoised.

The denoising loop asks each job's `PreviewTarget` whether a preview is due (at most one per interval of time,
none while the last is still being made, and always one at the last step), hands the due ones over as small uint8
images of the model's own grid, and goes on. `PreviewEncoder` scales each to the preview's size, in the job's
aspect, and encodes it as WebP: on a thread of its own on a GPU, on the loop's thread on a CPU (where a hand-over
costs more than the millisecond of the encode). The target hands the finished image to the job.
"""

from __future__ import annotations

import base64
import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from PIL import Image

from studio.engine_levers import DEFAULT_PREVIEW_INTERVAL_S

log = logging.getLogger(__name__)

# The long side of a preview in pixels: enough to see what the video is becoming, a few kilobytes as WebP.
PREVIEW_LONG_SIDE = 192
MEDIA_TYPE = "image/webp"
# WebP's fastest method: about a millisecond for a preview of smooth content; the higher methods save a few bytes.
WEBP_QUALITY, WEBP_METHOD = 75, 0


@dataclass(frozen=True)
class PreviewSettings:
    """The server's previews: whether it makes them, and the least time between two of one job."""

    enabled: bool = True
    interval_s: float = DEFAULT_PREVIEW_INTERVAL_S


@dataclass(frozen=True)
class PreviewImage:
    """A job's latest preview: its encoded image and the step it shows."""

    step: int
    total_steps: int
    data: bytes
    media_type: str = MEDIA_TYPE

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode()}"


def preview_size(width: int, height: int, long_side: int = PREVIEW_LONG_SIDE) -> tuple[int, int]:
    """(width, height) of a job's preview: its requested aspect, the long side `long_side` (or the video's own,
    where that is smaller)."""
    width, height = max(1, int(width)), max(1, int(height))
    scale = min(long_side, max(width, height)) / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def encode_image(frame: np.ndarray, size: tuple[int, int]) -> bytes:
    """A uint8 (H, W, 3) frame of any grid, scaled to `size` (width, height) and encoded as WebP."""
    image = Image.fromarray(np.ascontiguousarray(frame), "RGB")
    if image.size != size:
        image = image.resize(size, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, "WEBP", quality=WEBP_QUALITY, method=WEBP_METHOD)
    return out.getvalue()


class PreviewTarget:
    """One job's previews: when the next is due, its size, and where a finished one goes (`deliver`, from the
    encoder)."""

    def __init__(
        self,
        width: int,
        height: int,
        interval_s: float,
        deliver: Callable[[PreviewImage], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.size = preview_size(width, height)
        self.interval_s = max(0.0, interval_s)
        self._deliver, self._clock = deliver, clock
        self._lock = threading.Lock()
        self._last_at: float | None = None
        self._in_flight = False

    def due(self, step: int, total: int) -> bool:
        """Whether the loop should make this job's preview at `step`; True counts it as started (the caller then
        hands it to the encoder, or calls `finished(None)`)."""
        with self._lock:
            now = self._clock()
            if step < total:
                if self._in_flight:
                    return False  # a preview still under way: the next waits for it, however long it takes
                if self._last_at is not None and now - self._last_at < self.interval_s:
                    return False
            self._in_flight, self._last_at = True, now
            return True

    def finished(self, image: PreviewImage | None) -> None:
        """The preview started by `due` is done (None: it was dropped)."""
        with self._lock:
            self._in_flight = False
        if image is not None:
            self._deliver(image)


class PreviewEncoder:
    """Scales and encodes previews on its own thread (`workers` > 0), so that the device thread never waits for an
    image; or on the caller's thread (0), where that costs less than a hand-over: on a CPU the encode is short
    (benchmarks/RESULTS.md, live previews), and another thread would have to take the interpreter's lock and a core
    from the loop for it."""

    def __init__(self, workers: int = 1):
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engine-preview") if workers > 0 else None
        )
        # The first WebP encode of a process sets up the codec, a cost of its own: here, not in the first request.
        encode_image(np.zeros((8, 8, 3), dtype=np.uint8), (8, 8))

    def submit(self, frames: np.ndarray, targets: Sequence[PreviewTarget], step: int, total: int) -> None:
        """Encode frame `i` of uint8 `frames` (R, H, W, 3) as the preview of `targets[i]` at `step`."""
        if self._pool is None:
            self._encode(frames, list(targets), step, total)
            return
        try:
            self._pool.submit(self._encode, frames, list(targets), step, total)
        except RuntimeError:  # the engine is stopping: nothing will show these
            for target in targets:
                target.finished(None)

    def _encode(self, frames: np.ndarray, targets: list[PreviewTarget], step: int, total: int) -> None:
        for row, target in enumerate(targets):
            image = None
            try:
                image = PreviewImage(step=step, total_steps=total, data=encode_image(frames[row], target.size))
            except Exception:
                log.exception("a preview could not be encoded")
            target.finished(image)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
