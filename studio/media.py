"""Writing and checking mp4 files (H.264, yuv420p: what browsers play). No UI imports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    _check_frames(frames)
    writer = Mp4Writer(path, fps, width=frames.shape[2], height=frames.shape[1], crf=crf, threads=threads)
    try:
        writer.write(frames)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def _check_frames(frames: np.ndarray) -> None:
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise VideoError(f"frames must be (T, H, W, 3), got {frames.shape}")
    if frames.dtype != np.uint8:
        raise VideoError(f"frames must be uint8, got {frames.dtype}")


class Mp4Writer:
    """An mp4 written a few frames at a time, as a decoder makes them (the same file `encode_mp4` writes from
    all frames at once). `close()` finishes the file and checks it; `abort()` removes it."""

    def __init__(self, path: Path, fps: int, width: int, height: int, crf: int = 18, threads: int = 0):
        self.path = Path(path)
        self.width, self.height = width, height
        # yuv420p needs even sides: an odd side is padded by one row or column (edge pixels repeated).
        self._pad_h, self._pad_w = height % 2, width % 2
        self._threads = threads
        self._container = av.open(str(self.path), mode="w", format="mp4")
        stream = self._container.add_stream("libx264", rate=fps)
        stream.width, stream.height = width + self._pad_w, height + self._pad_h
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = threads
        # faststart puts the index first so the browser can start playing before the whole file arrives.
        stream.options = {"crf": str(crf), "preset": "veryfast", "movflags": "+faststart"}
        self._stream = stream
        self.frames_written = 0
        self.close_seconds: dict[str, float] = {}

    def write(self, frames: np.ndarray) -> None:
        """More uint8 frames (t, H, W, 3) of the video, in order."""
        _check_frames(frames)
        if frames.shape[1:3] != (self.height, self.width):
            raise VideoError(f"frames are {frames.shape[2]}x{frames.shape[1]}, the video is {self.width}x{self.height}")
        if self._pad_h or self._pad_w:
            frames = np.pad(frames, ((0, 0), (0, self._pad_h), (0, self._pad_w), (0, 0)), mode="edge")
        for frame in frames:
            for packet in self._stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                self._container.mux(packet)
        self.frames_written += len(frames)

    def close(self, decode: bool = True) -> VideoInfo:
        """Flush the encoder, finish the file, and report what it really holds: every frame decoded, or with
        `decode=False` the frames its index lists (the bitstream just came from the encoder; what could be
        wrong is an unfinished file). Raises VideoError if it holds fewer frames than were written."""
        started = time.perf_counter()
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
        finally:
            self._container.close()
        flushed = time.perf_counter()
        info = probe_mp4(self.path, threads=self._threads, decode=decode)
        self.close_seconds = {"flush": flushed - started, "check": time.perf_counter() - flushed}
        if info.num_frames != self.frames_written:
            raise VideoError(f"{self.path.name} holds {info.num_frames} frames, {self.frames_written} were written")
        return info

    def abort(self) -> None:
        try:
            self._container.close()
        except Exception:  # a half-written file that cannot be finished: it is removed all the same
            pass
        finally:
            self.path.unlink(missing_ok=True)


def probe_mp4(path: Path, threads: int = 0, decode: bool = True) -> VideoInfo:
    """Decode every frame and report what the file really holds; raises VideoError if it does not decode.
    `decode=False`: the frame count from the file's index, nothing decoded."""
    path = Path(path)
    with _video_stream(path) as (container, stream):
        stream.codec_context.thread_count = threads
        count = sum(1 for _ in container.decode(stream)) if decode else stream.frames
        return _info(stream, count, path)


def check_mp4(path: Path) -> VideoInfo:
    """What a file from elsewhere (a server's download) holds, checked without decoding it all: every packet of its
    video stream is read, so a file cut short shows (it holds fewer packets than its index lists), and packets are
    decoded until the first frame comes out, so a stream no decoder takes shows. Its frames are its packets (one
    each, as H.264 in mp4 holds them). Raises VideoError.

    Decoding every frame (probe_mp4) would spend, on each video, CPU that the studio's own servers may share."""
    path = Path(path)
    with _video_stream(path) as (container, stream):
        packets, decoded = 0, False
        for packet in container.demux(stream):
            if packet.size == 0:  # the demuxer's flush packet
                continue
            packets += 1
            if not decoded:
                decoded = bool(stream.codec_context.decode(packet))
        if packets and not decoded:
            decoded = bool(stream.codec_context.decode(None))  # a decoder holding frames back gives them now
        if not decoded:
            raise VideoError(f"{path.name} holds no frame that decodes")
        if stream.frames and packets < stream.frames:
            raise VideoError(f"{path.name} is cut short: {packets} of the {stream.frames} frames its index lists")
        return _info(stream, packets, path)


@contextmanager
def _video_stream(path: Path) -> Iterator[tuple[av.container.InputContainer, av.VideoStream]]:
    """The file opened, with its first video stream; FFmpeg's errors (there or in the caller's reading) as
    VideoError."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path.name} has no video stream")
            yield container, container.streams.video[0]
    except av.FFmpegError as exc:
        raise VideoError(f"{path.name} is not a playable video: {exc}") from exc


def _info(stream: av.VideoStream, num_frames: int, path: Path) -> VideoInfo:
    context = stream.codec_context
    return VideoInfo(
        width=context.width,
        height=context.height,
        num_frames=num_frames,
        fps=float(stream.average_rate or 0),
        codec=context.name,
        pix_fmt=str(context.pix_fmt),
        bytes=path.stat().st_size,
    )


def read_frames(path: Path) -> np.ndarray:
    """All frames as uint8 (T, H, W, 3)."""
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
