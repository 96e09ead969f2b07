"""How far one video is from another, frame by frame: the mean and largest absolute difference in uint8 levels
(RGB, as a player shows them) and the PSNR over the whole video. The bench compares each variant's videos with the
baseline's of the same prompt and seed (variant_fidelity.py); this module only compares frames and files.

Files are decoded in step, a frame of each at a time, so that two long 720p videos never sit in memory whole.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from studio.media import VideoError, encode_mp4, read_frames

PEAK = 255.0  # the largest uint8 level: PSNR's signal
# What the engines encode with (studio.media, vLLM-Omni): a re-encode at the same quality shows what one encode
# alone changes.
REENCODE_CRF = 18


@dataclass(frozen=True)
class Difference:
    """Two videos (or frames) of one shape, compared level by level."""

    frames: int
    mean_levels: float  # mean absolute difference over every pixel and channel
    max_levels: int  # the largest absolute difference anywhere
    psnr_db: float  # over the whole video; inf where the two are identical

    @property
    def identical(self) -> bool:
        return self.max_levels == 0


class DifferenceSum:
    """Frame pairs added one at a time; `result()` is their Difference as if compared all at once."""

    def __init__(self) -> None:
        self.frames = 0
        self._values = 0
        self._abs = 0
        self._squares = 0
        self._max = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        """One pair of uint8 frames (H, W, C), or a stack of them (T, H, W, C), of the same shape."""
        if a.shape != b.shape:
            raise ValueError(f"frames of shape {a.shape} and {b.shape} do not compare")
        if a.dtype != np.uint8 or b.dtype != np.uint8:
            raise ValueError(f"frames are compared as uint8 levels, got {a.dtype} and {b.dtype}")
        # int32: a uint8 difference wraps around, and squares of up to 255 overflow int16.
        diff = np.abs(a.astype(np.int32) - b.astype(np.int32))
        self.frames += 1 if a.ndim == 3 else a.shape[0]
        self._values += diff.size
        self._abs += int(diff.sum(dtype=np.int64))
        self._squares += int(np.square(diff).sum(dtype=np.int64))
        self._max = max(self._max, int(diff.max(initial=0)))

    def result(self) -> Difference:
        if not self._values:
            raise ValueError("no frames were compared")
        mse = self._squares / self._values
        psnr = math.inf if mse == 0 else 10.0 * math.log10(PEAK**2 / mse)
        return Difference(self.frames, self._abs / self._values, self._max, psnr)


def frame_difference(a: np.ndarray, b: np.ndarray) -> Difference:
    """Two uint8 frames, or two stacks of frames (T, H, W, 3), of one shape."""
    total = DifferenceSum()
    total.add(a, b)
    return total.result()


@dataclass(frozen=True)
class VideoComparison:
    """Two video files compared, or why they could not be: different sizes or frame counts, a file that does not
    decode. Exactly one of the two is set."""

    difference: Difference | None = None
    why_not: str | None = None


def _rgb_frames(container: av.container.InputContainer) -> Iterator[np.ndarray]:
    for frame in container.decode(video=0):
        yield frame.to_ndarray(format="rgb24")


def _size(container: av.container.InputContainer, path: Path) -> tuple[int, int]:
    if not container.streams.video:
        raise VideoError(f"{path.name} has no video stream")
    context = container.streams.video[0].codec_context
    return context.width, context.height


def compare_videos(a: Path, b: Path) -> VideoComparison:
    """Video `b` against video `a`, frame by frame, where both have the same size and number of frames."""
    try:
        with av.open(str(a)) as first, av.open(str(b)) as second:
            size_a, size_b = _size(first, Path(a)), _size(second, Path(b))
            if size_a != size_b:
                return VideoComparison(why_not=f"sizes differ: {size_a[0]}x{size_a[1]} and {size_b[0]}x{size_b[1]}")
            total = DifferenceSum()
            count_a = count_b = 0
            for frame_a, frame_b in itertools.zip_longest(_rgb_frames(first), _rgb_frames(second)):
                count_a += frame_a is not None
                count_b += frame_b is not None
                if frame_a is not None and frame_b is not None:
                    total.add(frame_a, frame_b)
            if count_a != count_b:
                return VideoComparison(why_not=f"frame counts differ: {count_a} and {count_b}")
            if not count_a:
                return VideoComparison(why_not="no frames decoded")
            return VideoComparison(total.result())
    except (OSError, VideoError, av.FFmpegError) as exc:
        return VideoComparison(why_not=f"does not decode: {exc}")


def reencode_difference(path: Path, fps: int) -> VideoComparison:
    """The video decoded, encoded again as the engines encode (H.264, CRF 18) and compared with itself: what one
    lossy encode alone moves, a floor for how close two encodes of different runs can come."""
    try:
        frames = read_frames(path)
        with tempfile.TemporaryDirectory(prefix="reencode-") as folder:
            again = Path(folder) / "again.mp4"
            encode_mp4(frames, fps, again, crf=REENCODE_CRF)
            return VideoComparison(frame_difference(frames, read_frames(again)))
    except (OSError, ValueError, av.FFmpegError) as exc:
        return VideoComparison(why_not=f"cannot re-encode {Path(path).name}: {exc}")
