"""Reading a server-sent event stream (text/event-stream): each event's type and data, comments skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def server_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event type, data) of each event of the stream's lines; an event with no type is a "message", and the
    lines of a multi-line data field are joined with newlines, as the format says."""
    kind, data = "", []
    async for line in lines:
        if not line:  # a blank line ends an event
            if data:
                yield kind or "message", "\n".join(data)
            kind, data = "", []
        elif line.startswith(":"):
            continue  # a comment: the server keeping the stream open
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
    if data:
        yield kind or "message", "\n".join(data)
