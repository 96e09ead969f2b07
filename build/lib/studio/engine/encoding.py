"""An mp4 encoded on a pool thread from frames handed over while the VAE is still decoding the rest, so that
a request's encode overlaps its decode instead of following it."""

from __future__ import annotations

import queue
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

    def push(self, frames: np.ndarray) -> None:
        """The next uint8 frames (t, H, W, 3) of the video."""
        self._start()
        self.pieces_pushed += 1
        self._pieces.put(frames)

    def finish(self, frames: np.ndarray) -> Future[VideoInfo | None]:
        """No more frames: the future gives what the finished file holds. `frames` is the whole video; it is
        encoded from there when no piece was pushed (a pipeline that does not hand frames over)."""
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
                if writer is None:
                    height, width = piece.shape[1], piece.shape[2]
                    writer = Mp4Writer(self.path, self.fps, width=width, height=height, threads=self.threads)
                writer.write(piece)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
