"""The page's tiles of requests being made, and a request's latest preview as its events bring them."""

from __future__ import annotations

import base64

from studio.backend.runs.request_state import RequestState, RequestView
from studio.protocol import PreviewEvent, ProgressEvent, VideoRequest
from studio.ui import previews

PIXEL = "data:image/webp;base64," + base64.b64encode(b"RIFF....WEBPVP8 ").decode()


def view(state: RequestState, prompt: str = "a red circle", number: int = 1) -> RequestView:
    request = VideoRequest(prompt=prompt, width=320, height=192, num_frames=33, num_inference_steps=35)
    return RequestView(id=f"req_{number:012x}", run_id="run", position=number, request=request, state=state)


def test_a_request_keeps_its_latest_preview_until_its_video_is_there():
    running = view(RequestState.RUNNING)
    running.job_event(ProgressEvent(step=3, total_steps=35, progress=7, elapsed_s=1.0, step_s=0.1))
    running.job_event(PreviewEvent(step=3, image=PIXEL))
    running.job_event(PreviewEvent(step=1, image=PIXEL.replace("RIFF", "OLD0")))  # late: an older one is dropped
    assert (running.step, running.total_steps, running.preview.step) == (3, 35, 3)
    assert running.preview.image == PIXEL
    running.finish(RequestState.DONE, None)
    assert running.preview is None
    cancelled = view(RequestState.RUNNING)
    cancelled.job_event(PreviewEvent(step=5, image=PIXEL))
    cancelled.finish(RequestState.CANCELLED, "cancelled")
    assert cancelled.preview is not None  # what it looked like when it stopped


def test_tiles_show_each_request_at_a_server_in_its_shape():
    forming, queued, waiting, done = (
        view(RequestState.RUNNING, '<b>"x"</b>', 1),
        view(RequestState.QUEUED, number=2),
        view(RequestState.WAITING, number=3),
        view(RequestState.DONE, number=4),
    )
    forming.job_event(ProgressEvent(step=7, total_steps=35, progress=20, elapsed_s=1.0, step_s=0.1))
    forming.job_event(PreviewEvent(step=7, image=PIXEL))
    html = previews.running_tiles([forming, queued, waiting, done], no_previews=None)
    assert html.count('class="running-tile"') == 2  # at a server: running and queued, not waiting nor done
    assert f'src="{PIXEL}"' in html and 'data-step="7"' in html and "step 7/35" in html
    assert "aspect-ratio: 320 / 192" in html
    assert "<b>" not in html and "&lt;b&gt;" in html  # a prompt is text, never markup
    assert "queued at the server" in html and "no preview yet" in html
    assert previews.running_tiles([waiting, done], no_previews=None) == ""


def test_a_server_without_previews_is_said_to_have_none():
    running = view(RequestState.RUNNING)
    html = previews.running_tiles([running], no_previews="this server sends no previews")
    assert "this server sends no previews" in html and "<img" not in html
    forming = previews.selected_forming(running, "this server sends no previews")
    assert "this server sends no previews" in forming and "the video appears here" in forming


def test_only_a_few_tiles_and_the_rest_counted():
    many = [view(RequestState.QUEUED, number=n) for n in range(previews.TILES + 3)]
    html = previews.running_tiles(many, None)
    assert html.count('class="running-tile"') == previews.TILES and "and 3 more at the servers" in html


def test_the_request_being_made_comes_before_those_queued_at_the_server():
    queued = [view(RequestState.QUEUED, f"queued prompt {n}", n) for n in range(1, previews.TILES + 1)]
    running = view(RequestState.RUNNING, "the running prompt", previews.TILES + 1)
    html = previews.running_tiles([*queued, running], None)
    assert "the running prompt" in html  # shown though the queued ones alone fill the tiles
    assert html.index("the running prompt") < html.index("queued prompt 1")
