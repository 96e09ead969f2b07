"""`--mcp`: the studio as an MCP server, through Gradio's own (`launch(mcp_server=True)`, at /gradio_api/mcp/).

Its tools are three API endpoints of the page's Blocks, each a thin call of the gateway's tools (gateway/tools.py):
`generate_video`, `follow_video`, `list_videos`. They run outside Gradio's queue, so Gradio's MCP server calls them
with the MCP request itself, whose Authorization header names the caller's key.

Gradio makes a tool of every public endpoint of the Blocks; the page's own (the Server tab's, the Bench's) are not
tools: `StudioMCPServer` keeps the three alone, in the list and for calls, for every caller.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr
import gradio.mcp

from studio.gateway.tools import MAX_FOLLOW_S, ToolCaller, ToolRefused, VideoTools
from studio.ui.client_address import client_address
from studio.ui.same_origin import cross_site

TOOLS = ("generate_video", "follow_video", "list_videos")


def tool_caller(request: gr.Request) -> ToolCaller:
    """The caller of a tool, from the MCP call's own HTTP request (Gradio hands it to the tool as it is)."""
    scope = request.scope
    return ToolCaller(
        authorization=request.headers.get("authorization"),
        address=client_address(scope),
        host=request.headers.get("host", ""),
        cross_site=cross_site(scope),
        base_url=str(request.base_url),
    )


def as_json(answer: dict[str, Any]) -> str:
    """A tool's answer as JSON text: Gradio's MCP server would write a dict as Python's repr."""
    return json.dumps(answer)


@contextmanager
def refusals() -> Iterator[None]:
    try:
        yield
    except ToolRefused as exc:
        raise gr.Error(str(exc), print_exception=False) from None


def add_mcp_tools(demo: gr.Blocks, tools: VideoTools) -> None:
    """The three tools, as API endpoints of `demo` (public: Gradio's MCP server lists public endpoints)."""

    async def generate_video(
        prompt: str,
        size: str = "",
        num_frames: int = 0,
        fps: int = 0,
        num_inference_steps: int = 0,
        guidance_scale: float = 0.0,
        seed: int = -1,
        negative_prompt: str = "",
        request: gr.Request = None,  # type: ignore[assignment]  # given by Gradio
    ) -> str:
        """Make a video from a text prompt on this studio, as the caller's API key's user. Answers the video's
        record as JSON at once (status queued or in_progress): follow it with follow_video until its status is completed,
        then download content_url with the same key (Authorization: Bearer KEY).

        Args:
            prompt: What the video shows.
            size: WIDTHxHEIGHT, one of the studio's sizes (e.g. 448x256 or 832x480); empty for the studio's default.
            num_frames: Frames to make (0 for the default of the size's tier).
            fps: Frames per second of the video (0 for the default).
            num_inference_steps: Denoising steps (0 for the default of the size's tier).
            guidance_scale: Classifier-free guidance scale (0 for the default).
            seed: The seed (-1 for a random one).
            negative_prompt: What the video should not show.
        """
        fields = {"prompt": prompt, "negative_prompt": negative_prompt, "size": size}
        numbers = {
            "num_frames": num_frames,
            "fps": fps,
            "num_inference_steps": num_inference_steps,
            "guidance_scale": guidance_scale,
        }
        fields |= {name: str(value) for name, value in numbers.items() if value}
        if seed is not None and seed >= 0:
            fields["seed"] = str(seed)
        with refusals():
            return as_json(await tools.generate(tool_caller(request), {k: v for k, v in fields.items() if v}))

    async def follow_video(
        video_id: str,
        wait_seconds: float = MAX_FOLLOW_S,
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> str:
        """Follow a video of the caller's: its record once it has finished (completed or failed), or after
        wait_seconds (at most 20) with its progress. While the status is queued or in_progress, call again.

        Args:
            video_id: The video's id, as generate_video answered it (req_...).
            wait_seconds: How long to wait for it to finish before answering (at most 20).
        """
        with refusals():
            return as_json(await tools.follow(tool_caller(request), video_id, wait_seconds))

    async def list_videos(
        limit: int = 20,
        after: str = "",
        request: gr.Request = None,  # type: ignore[assignment]
    ) -> str:
        """List the caller's own videos on this studio, newest first, each with its status and content_url.

        Args:
            limit: How many to list (at most 100).
            after: List those after this video id (the last of the previous page), for the next page.
        """
        with refusals():
            return as_json(await tools.videos(tool_caller(request), limit, after))

    with demo:
        for tool in (generate_video, follow_video, list_videos):
            # Outside the queue: Gradio's MCP server calls the function with the MCP request (its headers) itself.
            gr.api(tool, api_name=tool.__name__, queue=False, concurrency_limit=None)


class StudioMCPServer(gradio.mcp.GradioMCPServer):
    """Gradio's MCP server with the studio's tools alone (TOOLS): the page's other endpoints are neither listed nor
    callable through it."""

    def get_tool_to_endpoint(self) -> dict[str, str]:
        # By endpoint: on a Space, Gradio prefixes the tools' names with the Space's.
        tools = super().get_tool_to_endpoint().items()
        return {tool: endpoint for tool, endpoint in tools if endpoint.lstrip("/") in TOOLS}


def use_studio_mcp_server() -> None:
    """Have Gradio's launch make StudioMCPServer: it makes `gradio.mcp.GradioMCPServer(blocks)` while it builds
    the app, before it serves anything."""
    gradio.mcp.GradioMCPServer = StudioMCPServer  # type: ignore[misc]
