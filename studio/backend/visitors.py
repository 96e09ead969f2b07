"""Who a run belongs to. The backend knows a visitor by id; who they are (sign-in, roles) is the page's business."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Visitor:
    id: str
    name: str
    operator: bool = False  # sees and cancels everyone's work, and is not held to per-visitor limits


# The one person at the keyboard: the CLI's user, and the owner of history written before visitors existed.
LOCAL_OPERATOR = Visitor(id="local", name="local operator", operator=True)
