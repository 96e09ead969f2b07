"""Links to the studio's files, for the page: each names the studio's own file route (file_guard.py), which checks
the file's owner. Gradio is handed these links as URLs, so it neither copies the files nor serves them.

A component that takes a URL (a gallery's tile) needs it absolute: it is made from the event's own request, the way
Gradio makes the address of its own files (behind a proxy or a Space's domain too). HTML (the player, download
links) may use the same address."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

import gradio as gr
from gradio import route_utils

from studio.ui.file_guard import FILES_ROUTE, StudioFiles

PLAYER_MAX_HEIGHT = "70vh"  # the player and the lines under it fit a window


def page_root_url(request: gr.Request | None) -> str:
    """The page's public address, without a trailing slash ("" where no request is at hand: a relative link)."""
    raw = getattr(request, "request", None) if request is not None else None
    if raw is None:
        return ""
    try:
        return route_utils.get_root_url(raw, route_utils.get_api_call_path(raw), getattr(raw.app, "root_path", ""))
    except (ValueError, AttributeError):  # an event that came another way than the queue: its own base
        return str(raw.base_url).rstrip("/")


class FileLinks:
    """URLs of files under the outputs folder, through the studio's file route."""

    def __init__(self, outputs_root: Path) -> None:
        self.files = StudioFiles(outputs_root, owner_of=lambda _id: None)

    def url(self, path: Path | str | None, request: gr.Request | None) -> str | None:
        """The file's URL, or None for a file outside the outputs folder (or no file)."""
        relative = self.files.relative(Path(path)) if path else None
        if relative is None:
            return None
        return f"{page_root_url(request)}{FILES_ROUTE}{quote(relative)}"

    def player(self, video: Path | None, request: gr.Request | None, aspect: float | None = None) -> str:
        """The selected video as an HTML player that keeps its shape (wide or tall) within the page: at most as wide
        as its column and PLAYER_MAX_HEIGHT tall (a 720p 9:16 video is 1280 px), its shape kept (`aspect`, width
        over height, holds it before the file has loaded)."""
        url = self.url(video, request)
        if url is None:
            return ""
        shape = f" aspect-ratio: {aspect:.4f};" if aspect else ""
        return (
            f'<video src="{html.escape(url)}" controls autoplay loop muted playsinline preload="auto" '
            f'style="display:block; margin:0 auto; width:auto; height:auto; max-width:100%; '
            f'max-height:{PLAYER_MAX_HEIGHT}; object-fit:contain;{shape}"></video>'
        )

    def download(self, path: Path | None, request: gr.Request | None, label: str) -> str:
        """A download link to the file ("" where there is none)."""
        url = self.url(path, request)
        if url is None or path is None:
            return ""
        name = html.escape(Path(path).name)
        return f'<a href="{html.escape(url)}" download="{name}" class="studio-download">{html.escape(label)}</a>'
