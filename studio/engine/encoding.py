"""An mp4 encoded on a pool thread from frames handed over while the VAE is still decoding the rest, so that
a request's encode overlaps its decode instead of following it."""

from __future__ import annotations

import queue
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from studio.media import Mp4Writer, VideoInfo

_END = object()
_ABORT = object()


class StreamedEncode:
    """One video's encode. The worker thread calls `push` with each piece of frames as it is decoded (never
    blocking it), then `finish` once; a pool thread writes the pieces as they come. `abort` drops the file."""

    def __init__(self, pool: ThreadPoolExecutor, path: Path, fps: int, threads: int = 0):
        self.path, self.fps, self.threads = Path(path), fps, threads
        self._pool = pool
        self._pieces: queue.SimpleQueue = queue.SimpleQueue()
        self._future: Future[VideoInfo | None] | None = None
        self.pieces_pushed = 0
        self.backlog_at_finish = 0  # pieces not yet written when the last one came: the encoder lagging behind
        self.close_seconds: dict[str, float] = {}

    def push(self, frames: np.ndarray | Iterable[np.ndarray]) -> None:
        """The next uint8 frames (t, H, W, 3) of the video (or pieces of them, in order)."""
        self._start()
        self.pieces_pushed += 1
        self._pieces.put(frames)

    def finish(self, frames: np.ndarray | Iterable[np.ndarray]) -> Future[VideoInfo | None]:
        """No more frames: the future gives what the finished file holds. `frames` is the whole video, as one
        array or as pieces in order; it is encoded from there when no piece was pushed (a pipeline that does not
        hand frames over). Pieces are taken one at a time on the encoder's thread, as it writes them (a lazy
        iterator: the video is made, resized, a few frames at a time, never whole)."""
        if self.pieces_pushed == 0:
            self.push(frames)
        self.backlog_at_finish = self._pieces.qsize()
        self._pieces.put(_END)
        assert self._future is not None
        return self._future

    def abort(self) -> None:
        if self._future is not None:
            self._pieces.put(_ABORT)

    def _start(self) -> None:
        if self._future is None:
            self._future = self._pool.submit(self._write)

    def _write(self) -> VideoInfo | None:
        writer: Mp4Writer | None = None
        try:
            while True:
                piece = self._pieces.get()
                if piece is _END:
                    if writer is None:
                        raise ValueError("no frames to encode")
                    # Frames straight from this encoder: the file's index is checked, not every frame decoded.
                    info = writer.close(decode=False)
                    self.close_seconds = writer.close_seconds
                    return info
                if piece is _ABORT:
                    if writer is not None:
                        writer.abort()
                    return None
                for frames in [piece] if isinstance(piece, np.ndarray) else piece:
                    if writer is None:
                        height, width = frames.shape[1], frames.shape[2]
                        writer = Mp4Writer(self.path, self.fps, width=width, height=height, threads=self.threads)
                    writer.write(frames)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise


def encode_pieces(pieces: Iterable[np.ndarray], fps: int, path: Path, threads: int = 0) -> VideoInfo:
    """An mp4 (as `studio.media.encode_mp4` writes it) from uint8 frames (t, H, W, 3) given a few at a time, in
    order: only the piece being written is in memory, not the video."""
    writer: Mp4Writer | None = None
    try:
        for frames in pieces:
            if writer is None:
                writer = Mp4Writer(path, fps, width=frames.shape[2], height=frames.shape[1], threads=threads)
            writer.write(frames)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None:
        raise ValueError("no frames to encode")
    return writer.close()
