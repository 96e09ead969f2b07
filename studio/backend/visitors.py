"""Who a run belongs to. The backend knows a visitor by id; who they are (sign-in, roles) is the page's business."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Visitor:
    id: str
    name: str
    operator: bool = False  # sees and cancels everyone's work, and is not held to per-visitor limits
    # Whose limits bind this visitor (videos per hour, queued requests, the fair-share turn): an account's and an
    # operator's are their own (the id, where left empty); guests of one client address share theirs (a keyed hash
    # of the address), so that a guest who drops its cookie is a new visitor with the same quota and turn. Not part
    # of who the visitor is: one guest seen from two addresses is one visitor, and sees the same work.
    party: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.party:
            object.__setattr__(self, "party", self.id)


# The one person at the keyboard: the CLI's user, and the owner of history written before visitors existed.
LOCAL_OPERATOR = Visitor(id="local", name="local operator", operator=True)


class OpenPages:
    """The pages each visitor has open: a visitor with two tabs who closes one still has the other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: dict[str, set[str]] = {}

    def opened(self, visitor: Visitor, page: str) -> None:
        with self._lock:
            self._pages.setdefault(visitor.id, set()).add(page)

    def closed(self, visitor: Visitor, page: str) -> bool:
        """Forget the page; True where it was the visitor's last one open."""
        with self._lock:
            pages = self._pages.get(visitor.id, set())
            pages.discard(page)
            if pages:
                return False
            self._pages.pop(visitor.id, None)
            return True

    def count(self, visitor: Visitor) -> int:
        with self._lock:
            return len(self._pages.get(visitor.id, ()))
