"""The guards that keep one visitor from holding what a crowd needs, as `launch()` takes them: bodies bounded
(body_limit), page sessions bound to their makers (session_binding), calls in flight capped per visitor
(call_limit)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.middleware import Middleware

from studio.backend.face import MAX_UPLOAD_BYTES, StudioController
from studio.ui.body_limit import BodyLimit
from studio.ui.call_limit import CallLimit
from studio.ui.identity import PageAccess
from studio.ui.session_binding import SessionBinding


@dataclass(frozen=True)
class CrowdGuards:
    bodies: Middleware  # in front of every other: nothing reads a body before its bound is checked
    calls: list[Middleware]  # behind the sign-in's guards, in front of Gradio's routes


def crowd_guards(controller: StudioController, access: PageAccess) -> CrowdGuards:
    """The middleware, the cap read from the settings at each call (an operator's change applies at once)."""
    return CrowdGuards(
        bodies=Middleware(BodyLimit, max_upload_bytes=MAX_UPLOAD_BYTES),
        calls=[
            Middleware(SessionBinding, access=access),
            Middleware(CallLimit, access=access, cap=lambda: controller.settings.visitor_max_calls_in_flight),
        ],
    )
