"""Frames resized to the requested size a few at a time: a clip's frames at 720p take 2.8 MB each as uint8 and
11 MB each in float32, so a 200-frame clip interpolated whole needs gigabytes; a few frames at a time need tens of
megabytes, whatever the clip's length. Each frame is interpolated on its own, so a chunk's frames come out as the
whole clip's would."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Frames interpolated at once: at 720p about 45 MB of float32 each way, and few enough calls to cost nothing.
RESIZE_CHUNK = 4


def _resized(frames: np.ndarray, width: int, height: int) -> np.ndarray:
    import torch  # on first use: the engine's request types import this module, and its entry point loads no torch

    tensor = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    resized = torch.nn.functional.interpolate(tensor, size=(height, width), mode="bilinear", antialias=True)
    return resized.clamp_(0, 255).round_().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def resized_chunks(frames: np.ndarray, width: int, height: int, chunk: int = RESIZE_CHUNK) -> Iterator[np.ndarray]:
    """uint8 frames (T, h, w, 3) as uint8 (t, height, width, 3) pieces of at most `chunk` frames, in order."""
    for start in range(0, frames.shape[0], max(1, chunk)):
        yield _resized(frames[start : start + max(1, chunk)], width, height)


def resize_frames(frames: np.ndarray, width: int, height: int, chunk: int = RESIZE_CHUNK) -> np.ndarray:
    """uint8 frames (T, h, w, 3) at (width, height), bilinear with antialiasing; the result is the only thing of the
    clip's size made: it is filled `chunk` frames at a time."""
    out = np.empty((frames.shape[0], height, width, 3), dtype=np.uint8)
    start = 0
    for piece in resized_chunks(frames, width, height, chunk):
        out[start : start + len(piece)] = piece
        start += len(piece)
    return out
