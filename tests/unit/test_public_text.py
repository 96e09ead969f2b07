"""A visitor reads a server's errors without the server's address or the studio machine's paths."""

from __future__ import annotations

import pytest

from studio.backend.runs.public_text import for_visitors


@pytest.mark.parametrize(
    "said, shown",
    [
        ("cannot reach http://127.0.0.1:34327: connection refused", "cannot reach the server: connection refused"),
        (
            "http://10.0.3.7:8001/v1 did not answer the create call in time",
            "the server did not answer the create call in time",
        ),
        (
            "download of video_1 from https://gpu-node.internal:8000/v1 broke off",
            "download of video_1 from the server broke off",
        ),
        (
            'the server crashed (exit code -9): File "/srv/studio/.venv/lib/python3.11/site.py", line 3',
            'the server crashed (exit code -9): File "a file on the studio\'s machine", line 3',
        ),
    ],
)
def test_addresses_and_paths_are_put_in_words(said, shown):
    assert for_visitors(said) == shown


@pytest.mark.parametrize(
    "plain",
    [
        "blocked by guardrails: the prompt names 'gore'",
        "frames must be from 1 to 1000, got 5000",
        "cancelled by the user",
        "8 of 45 calls / 2 s",
        None,
        "",
    ],
)
def test_text_without_them_is_kept_as_it_is(plain):
    assert for_visitors(plain) == plain
