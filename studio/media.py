"""Writing and checking mp4 files (H.264, yuv420p: what browsers play). No UI imports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np


class VideoError(ValueError):
    """A file that is not a playable video."""


@dataclass(frozen=True)
class VideoInfo:
    width: int
    height: int
    num_frames: int
    fps: float
    codec: str
    pix_fmt: str
    bytes: int


def encode_mp4(frames: np.ndarray, fps: int, path: Path, crf: int = 18, threads: int = 0) -> VideoInfo:
    """Encode uint8 frames (T, H, W, 3) as H.264 yuv420p mp4 at constant quality (CRF 18, as vLLM-Omni).

    yuv420p needs even sides, so an odd side is padded by one row or column (edge pixels repeated).
    `threads` caps the encoder's threads (0: the encoder picks, one per core); an engine given a CPU thread
    budget passes it on so that replicas sharing a machine do not steal each other's cores.
    """
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise VideoError(f"frames must be (T, H, W, 3), got {frames.shape}")
    if frames.dtype != np.uint8:
        raise VideoError(f"frames must be uint8, got {frames.dtype}")
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    path = Path(path)
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = threads
        # faststart puts the index first so the browser can start playing before the whole file arrives.
        stream.options = {"crf": str(crf), "preset": "veryfast", "movflags": "+faststart"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return probe_mp4(path, threads=threads)


def probe_mp4(path: Path, threads: int = 0) -> VideoInfo:
    """Decode every frame and report what the file really holds; raises VideoError if it does not decode."""
    path = Path(path)
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path.name} has no video stream")
            stream = container.streams.video[0]
            stream.codec_context.thread_count = threads
            count = sum(1 for _ in container.decode(stream))
            return VideoInfo(
                width=stream.codec_context.width,
                height=stream.codec_context.height,
                num_frames=count,
                fps=float(stream.average_rate or 0),
                codec=stream.codec_context.name,
                pix_fmt=str(stream.codec_context.pix_fmt),
                bytes=path.stat().st_size,
            )
    except av.FFmpegError as exc:
        raise VideoError(f"{path.name} is not a playable video: {exc}") from exc


def read_frames(path: Path) -> np.ndarray:
    """All frames as uint8 (T, H, W, 3)."""
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
