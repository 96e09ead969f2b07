"""The studio as an MCP server (`--mcp`): the `mcp` package's own client, over streamable HTTP, against a real studio on
its embedded engine with two API keys. The tools are the studio's three alone; each runs with the caller's key, under
the gateway's rules; a video made through them is its user's alone and its URL answers that user's key alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from studio.gateway.keys import add_key
from tests.studio_process import RunningStudio, start_studio, stop_studio

USERS = ("alice", "bob")
TOOLS = {"generate_video", "follow_video", "list_videos"}
SIZE = "256x256"
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[tuple[RunningStudio, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("mcp")
    key_file = folder / "keys.txt"
    keys = {user: add_key(key_file, user) for user in USERS}
    # Accounts too: the page's sign-in stands in front of Gradio's routes, and the tools take keys all the same.
    # (ops, the first, is the operator: alice and bob are visitors.)
    accounts = [flag for user in ("ops", *USERS) for flag in ("--auth", f"{user}:{user}-pass")]
    running = start_studio(
        folder / "outputs", folder / "studio.log", *accounts, "--mcp", "--api-key-file", str(key_file)
    )
    yield running, keys
    stop_studio(running)


@contextlib.asynccontextmanager
async def session_of(studio: RunningStudio, key: str | None) -> AsyncIterator[ClientSession]:
    """An MCP session with the studio, calling with `key` (None: no Authorization header)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0)) as client,
        streamable_http_client(f"{studio.url}/gradio_api/mcp/", http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def answer(result) -> dict[str, Any]:
    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def refusal(result) -> str:
    assert result.isError, result.content
    return " ".join(part.text for part in result.content)


async def make_and_follow(session: ClientSession, prompt: str) -> dict[str, Any]:
    record = answer(
        await session.call_tool(
            "generate_video", {"prompt": prompt, "size": SIZE, "num_frames": 5, "num_inference_steps": 2, "seed": 3}
        )
    )
    assert record["status"] in ("queued", "in_progress", "completed"), record
    async with asyncio.timeout(RUN_TIMEOUT_S):
        while record["status"] not in ("completed", "failed"):
            record = answer(await session.call_tool("follow_video", {"video_id": record["id"], "wait_seconds": 10}))
    return record


def test_an_mcp_client_lists_the_studios_tools_and_makes_a_video_of_its_users(studio):
    running, keys = studio

    async def scenario() -> tuple[set[str], dict[str, Any], dict[str, Any], str, str, dict[str, Any]]:
        async with session_of(running, keys["bob"]) as bob:
            listed = {tool.name for tool in (await bob.list_tools()).tools}
            video = await make_and_follow(bob, "a blue square mcp-bob-1")
            mine = answer(await bob.call_tool("list_videos", {"limit": 10}))
            # The page's own endpoints are no tools, for anyone: the Server tab's stop is not callable through MCP.
            not_a_tool = refusal(await bob.call_tool("stop_server", {}))
        async with session_of(running, keys["alice"]) as alice:
            theirs = answer(await alice.call_tool("list_videos", {"limit": 10}))
            hidden = refusal(await alice.call_tool("follow_video", {"video_id": video["id"], "wait_seconds": 0}))
        return listed, video, mine, not_a_tool, hidden, theirs

    listed, video, mine, not_a_tool, hidden, theirs = asyncio.run(scenario())
    assert listed == TOOLS
    assert video["status"] == "completed" and video["size"] == SIZE and video["progress"] == 100, video
    assert [item["id"] for item in mine["data"]] == [video["id"]]
    assert "stop_server" in not_a_tool
    # Another key's video is not found, in the words of one that never was; its list holds its own alone.
    assert [item["id"] for item in theirs["data"]] == []
    assert video["id"] in hidden and "not found" in hidden

    # The URL a tool answers is the gateway's, and it answers bob's key alone.
    url = video["content_url"]
    assert url == f"{running.url}/v1/videos/{video['id']}/content"
    mp4 = httpx.get(url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=30)
    assert mp4.status_code == 200 and mp4.content[4:8] == b"ftyp"
    assert httpx.get(url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=30).status_code == 404
    assert httpx.get(url, timeout=30).status_code == 401


def test_a_tool_called_without_a_key_or_with_a_wrong_one_is_refused_saying_how(studio):
    running, _ = studio

    async def scenario() -> tuple[set[str], str, str]:
        async with session_of(running, None) as nobody:
            listed = {tool.name for tool in (await nobody.list_tools()).tools}
            without = refusal(await nobody.call_tool("generate_video", {"prompt": "a red circle mcp-none"}))
        async with session_of(running, "not-a-key") as stranger:
            wrong = refusal(await stranger.call_tool("list_videos", {}))
        return listed, without, wrong

    listed, without, wrong = asyncio.run(scenario())
    assert listed == TOOLS
    assert "Authorization: Bearer KEY" in without
    assert "not one of this studio's" in wrong


def test_a_tools_bad_field_is_refused_naming_it(studio):
    running, keys = studio

    async def scenario() -> str:
        async with session_of(running, keys["bob"]) as bob:
            return refusal(await bob.call_tool("generate_video", {"prompt": "a red circle", "size": "123x45"}))

    assert "size" in asyncio.run(scenario())
