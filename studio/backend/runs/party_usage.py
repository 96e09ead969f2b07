"""What a party (Visitor.party: an account, or the guests of one client address) has asked of the studio: its
requests waiting, and its videos in the last hour, all its visitors together.

Read from the board (this studio's runs in memory), not from history: a party of guests is a keyed hash of a client
address, which the studio keeps in memory only and never writes to disk. Each visitor's own count still comes from
history (OutputStore.requests_since), so a restart forgets only what a guest's siblings of the same address made
before it, and a visitor's limits are the larger of the two.
"""

from __future__ import annotations

from studio.backend.runs.board import RequestBoard
from studio.backend.runs.request_state import RequestState
from studio.backend.runs.run import Run
from studio.backend.runs.store import UNCOUNTED_STATES


def _party_runs(board: RequestBoard, party: str) -> list[Run]:
    return [run for run in list(board.runs) if run.visitor.party == party]


def party_unsent(board: RequestBoard, party: str) -> int:
    """The party's requests waiting in the studio, not yet sent to a server."""
    return sum(1 for run in _party_runs(board, party) for view in run.views if view.state is RequestState.WAITING)


def party_made_since(board: RequestBoard, party: str, since: float) -> int:
    """The party's requests made since `since` that did not end without a video (as requests_since counts)."""
    return sum(
        1
        for run in _party_runs(board, party)
        for view in run.views
        if view.timings.created >= since and str(view.state) not in UNCOUNTED_STATES
    )
