"""The gallery's tiles: a JPEG poster of each finished video (its first frame, made once, next to the mp4) with a
caption. Images keep the page light where dozens of <video> tiles would each load a file; selecting a tile
plays the video itself (the tile's file name carries the request id)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import av

from studio.backend.face import RequestView, latency_parts
from studio.ui.markdown import clipped

TILES = 60
REQUEST_ID = re.compile(r"req_[0-9a-f]{12}")
POSTER_QUALITY = 85


def poster_for(video: Path) -> Path | None:
    """The video's first frame as a JPEG beside it (`req_….jpg`), written once; None if the video does not decode."""
    poster = video.with_suffix(".jpg")
    if poster.is_file():
        return poster
    partial = poster.with_name(f".{poster.name}.{os.getpid()}")  # another page may be writing the same poster
    try:
        with av.open(str(video)) as container:
            frame = next(container.decode(video=0))
        frame.to_image().save(partial, "JPEG", quality=POSTER_QUALITY)
        partial.replace(poster)
    except (av.FFmpegError, StopIteration, OSError):
        with contextlib.suppress(OSError):
            partial.unlink()
        return None
    return poster


def gallery_items(
    views: list[RequestView], url_of: Callable[[Path], str | None], limit: int = TILES
) -> list[tuple[str, str]]:
    """(poster URL, caption) per finished video, newest first as given; the mp4 itself where no poster can be made.
    `url_of` gives a file's URL (the studio's file route): Gradio is handed no file of the outputs folder."""
    items = []
    for view in views[:limit]:
        if view.video_path is None:
            continue
        latency = latency_parts(view.timings).latency_s or 0  # from Generate, as the table says
        url = url_of(poster_for(view.video_path) or view.video_path)
        if url is not None:
            items.append((url, f"{clipped(view.request.prompt, 60)} · seed {view.request.seed} · {latency:.1f} s"))
    return items


def request_id_in(value: object) -> str | None:
    """The request id inside a gallery selection (its tile's file name is the request id)."""
    match = REQUEST_ID.search(str(value))
    return match.group(0) if match else None
