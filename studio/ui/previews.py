"""A visitor's requests as their videos form: a tile per request at the server, with its latest preview and step,
and the Selected video area's larger view of one of them.

A preview is the server's small image, put inline in the HTML (a data URL the protocol checks is an image): it
reaches only the page it is rendered for, and the page renders only the visitor's own requests (and, for
operators, everyone's), so no URL exists that another visitor could ask for. Where the server sends none (vLLM-Omni
and Cosmos Framework servers have no previews), the tile says so and shows the progress as the server reports it.
"""

from __future__ import annotations

import html

from studio.backend.face import RequestState, RequestView
from studio.ui import tables
from studio.ui.markdown import clipped

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


def running_tiles(views: list[RequestView], no_previews: str | None) -> str:
    """The tiles of the requests at the servers among `views` (the visitor's, in the table's order): empty when none.
    `no_previews`: why the engine in use sends none (None where it does)."""
    # Those being made first, then those waiting at a server, each in the table's order.
    at_server = sorted(
        (view for view in views if view.state in AT_SERVER), key=lambda view: view.state is not RequestState.RUNNING
    )[:TILES]
    if not at_server:
        return ""
    tiles = []
    for view in at_server:
        caption = f"{_progress_words(view)} · {clipped(view.request.prompt, 48)}"
        tiles.append(
            f'<figure class="running-tile" data-request="{html.escape(view.id)}" style="width: {TILE_WIDTH_PX}px;">'
            f"{_picture(view, no_previews)}"
            f"<figcaption>{html.escape(caption)} · <code>{html.escape(tables.short(view.id))}</code></figcaption>"
            "</figure>"
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
