"""A visitor's requests as their videos form: a tile per request at the server, with its latest preview and step,
and the Selected video area's larger view of one of them.

A preview is the server's small image, put inline in the HTML (a data URL the protocol checks is an image): it
reaches only the page it is rendered for, and the page renders only the visitor's own requests (and, for
operators, everyone's), so no URL exists that another visitor could ask for. Where the server sends none (vLLM-Omni
and Cosmos Framework servers have no previews), the tile says so and shows the progress as the server reports it.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from studio.backend.face import RequestState, RequestView
from studio.ui import tables
from studio.ui.file_links import PLAYER_MAX_HEIGHT
from studio.ui.markdown import clipped

# How far along a request is, and its time to go (None: no estimate yet), as the requests' table reckons them
# (the board's progress).
ProgressOf = Callable[[RequestView], tuple[float, float | None]]

TILES = 12  # the requests at the servers shown; the table lists them all
TILE_WIDTH_PX = 180
AT_SERVER = (RequestState.QUEUED, RequestState.RUNNING, RequestState.DOWNLOADING)
PREVIEW_MAX_HEIGHT = "60vh"


def _progress_words(view: RequestView) -> str:
    if view.state is RequestState.WAITING:
        return "waiting for a slot in the studio"
    if view.state is RequestState.QUEUED:
        return "queued at the server"
    if view.state is RequestState.DOWNLOADING:
        return "downloading"
    if view.step is not None and view.total_steps:
        return f"step {view.step}/{view.total_steps}"
    return f"{view.progress:.0f}%"


def _picture(view: RequestView, no_previews: str | None, max_height: str | None = None) -> str:
    """The preview in the request's shape, or a box of that shape saying why there is none yet."""
    shape = f"aspect-ratio: {view.request.width} / {view.request.height};"
    bound = f" max-height: {max_height};" if max_height else ""
    if view.preview is not None:
        return (
            f'<img class="preview-image" src="{html.escape(view.preview.image)}" alt="preview at step '
            f'{view.preview.step}" data-step="{view.preview.step}" style="{shape}{bound} width: 100%; '
            f'object-fit: contain; display: block;">'
        )
    why = "no preview yet" if view.state is not RequestState.RUNNING or no_previews is None else no_previews
    return f'<div class="preview-empty" style="{shape}{bound}"><span>{html.escape(why)}</span></div>'


def time_left_words(seconds: float | None) -> str:
    """A time to go as a tile says it: whole seconds under a minute, then to 10 s; empty without an estimate."""
    if seconds is None:
        return ""
    if seconds < 1:
        return "finishing"
    if seconds < 60:
        return f"~{seconds:.0f} s left"
    minutes, rest = divmod(int(round(seconds / 10) * 10), 60)
    return f"~{minutes} min {rest} s left" if rest else f"~{minutes} min left"


def _progress_bar(percent: float) -> str:
    return (
        f'<div class="tile-progress" role="progressbar" aria-valuenow="{percent:.0f}" aria-valuemin="0" '
        f'aria-valuemax="100"><span style="width: {max(0.0, min(100.0, percent)):.0f}%;"></span></div>'
    )


def running_tiles(views: list[RequestView], no_previews: str | None, progress_of: ProgressOf | None = None) -> str:
    """The tiles of the requests at the servers among `views` (the visitor's, in the table's order): empty when none.
    `no_previews`: why the engine in use sends none (None where it does). `progress_of`: a request's progress and
    time to go, shown on the tile of one being made (a bar and "~12 s left")."""
    # Those being made first, then those waiting at a server, each in the table's order.
    at_server = sorted(
        (view for view in views if view.state in AT_SERVER), key=lambda view: view.state is not RequestState.RUNNING
    )[:TILES]
    if not at_server:
        return ""
    tiles = []
    for view in at_server:
        bar, left = "", ""
        if progress_of is not None and view.state is RequestState.RUNNING:
            percent, eta_s = progress_of(view)
            bar, left = _progress_bar(percent), time_left_words(eta_s)
        said = " · ".join(part for part in (_progress_words(view), left) if part)
        tiles.append(
            f'<figure class="running-tile" data-request="{html.escape(view.id)}" style="width: {TILE_WIDTH_PX}px;">'
            f"{_picture(view, no_previews)}{bar}"
            f'<figcaption><strong class="tile-state">{html.escape(said)}</strong><br>'
            f"{html.escape(clipped(view.request.prompt, 48))} · <code>{html.escape(tables.short(view.id))}</code>"
            "</figcaption></figure>"
        )
    more = len([view for view in views if view.state in AT_SERVER]) - len(at_server)
    tail = f'<p class="running-more">and {more} more at the servers (the table lists them)</p>' if more > 0 else ""
    return f'<div class="running-tiles"><p class="running-title">Being made</p>{"".join(tiles)}</div>{tail}'


def selected_forming(view: RequestView, no_previews: str | None) -> str:
    """The Selected video area for a request not finished yet: its preview as it forms, larger, and its state."""
    return (
        f'<div class="selected-forming" data-request="{html.escape(view.id)}">'
        f"{_picture(view, no_previews, PREVIEW_MAX_HEIGHT)}"
        f'<p class="selected-forming-state">{html.escape(view.state.value)}, {html.escape(_progress_words(view))}'
        " (the video appears here when it is done)</p></div>"
    )


PLAYER_UPSCALE = 2  # a small video is drawn at most this many times its size: larger, it is only blurred


def player_box(player: str, width: int | None, height: int | None) -> str:
    """The player sized to its video: as wide as its column, at most PLAYER_UPSCALE times the video's width and as
    wide as its shape allows within the player's height bound, centred (page.py's CSS fills the box)."""
    if not player or not width or not height:
        return player
    bound = f"min({width * PLAYER_UPSCALE}px, calc({PLAYER_MAX_HEIGHT} * {width / height:.4f}))"
    return f'<div class="studio-player" style="max-width: {bound}; margin: 0 auto;">{player}</div>'
