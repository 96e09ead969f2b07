"""Who is asking, at every event of the page: the account signed in to the page (Gradio's login), the Hugging
Face user signed in on a Space, or only a browser (a guest); and what they may see and do.

Every event resolves its visitor from its own request, so Gradio's API (gradio_client, or a hand-made call of any
endpoint) is held to the same rules as the page's buttons.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import gradio as gr

from studio.backend.face import LOCAL_OPERATOR, AccessPolicy, GuestArrivals, Visitor
from studio.ui.client_address import request_address
from studio.ui.file_guard import BROWSER_COOKIE, VisitorBook
from studio.ui.markdown import markdown_text

EVERYONE, MINE = "everyone", "mine"


def browser_of(request: gr.Request | None) -> str:
    """What tells this browser from others: the studio's cookie, or the page session where a caller has no
    cookies (an API client). Either is a secret (whoever sends it is this guest): it goes no further than this
    process's memory; a guest's visitor id holds only its keyed hash (AccessPolicy.visitor)."""
    if request is None:
        return ""
    cookies = getattr(request, "cookies", None) or {}
    mark = cookies.get(BROWSER_COOKIE)
    if mark:
        return mark
    return f"session-{request.session_hash}" if request.session_hash else ""


class PageAccess:
    def __init__(
        self,
        policy: AccessPolicy,
        book: VisitorBook | None = None,
        new_guests_per_hour: Callable[[], int] | None = None,
    ) -> None:
        """`new_guests_per_hour`: the live setting (an operator may change it while the studio serves); by default
        the policy's, as the settings had it."""
        self.policy = policy
        self.book = book or VisitorBook()
        self.arrivals = GuestArrivals(new_guests_per_hour or (lambda: policy.new_guests_per_address_per_hour))

    def _resolve(
        self, request: gr.Request | None, profile: gr.OAuthProfile | None
    ) -> tuple[Visitor | None, tuple[str, str]]:
        """The visitor asking, or None and what they are told: to sign in, or that their address has started too
        many new guests (then nothing of this guest is recorded)."""
        user = getattr(request, "username", None) if request is not None else None
        hf_user = getattr(profile, "username", None) if profile is not None else None
        browser = browser_of(request)
        address = request_address(request)
        visitor = self.policy.visitor(user=user, hf_user=hf_user, browser=browser, address=address)
        if visitor is None:
            return None, ("Sign in", self.policy.sign_in_message())
        if not self.arrivals.admit(visitor):
            return None, ("Too many new guests", self.arrivals.refusal())
        cookies = (getattr(request, "cookies", None) or {}) if request is not None else {}
        if cookies.get(BROWSER_COOKIE):
            self.book.note(cookies[BROWSER_COOKIE], visitor)  # the file guard reads it
        return visitor, ("", "")

    def visitor(self, request: gr.Request | None, profile: gr.OAuthProfile | None = None) -> Visitor | None:
        return self._resolve(request, profile)[0]

    def require(self, request: gr.Request | None, profile: gr.OAuthProfile | None = None) -> Visitor:
        """The visitor asking; anyone not signed in is told how to, and nothing happens."""
        visitor, (title, refusal) = self._resolve(request, profile)
        if visitor is None:
            raise gr.Error(refusal, title=title, print_exception=False)
        return visitor

    def require_operator(
        self, request: gr.Request | None, profile: gr.OAuthProfile | None = None, *, action: str
    ) -> Visitor:
        """An operator, or a refusal that changes nothing."""
        visitor = self.require(request, profile)
        if not visitor.operator:
            raise gr.Error(f"only an operator of this studio can {action}", title="Not allowed", print_exception=False)
        return visitor

    @staticmethod
    def scope(visitor: Visitor, show: str | None = MINE) -> Visitor | None:
        """Whose work a view shows: the visitor's own, or everyone's (None) where an operator asks for it."""
        return None if visitor.operator and show == EVERYONE else visitor

    def header(self, visitor: Visitor | None) -> str:
        if visitor is None:
            return html.escape(self.policy.sign_in_message())
        if visitor == LOCAL_OPERATOR:
            return "You are this studio's **operator** (it has no sign-in)"
        role = "operator" if visitor.operator else "visitor"
        return f"Signed in as **{markdown_text(visitor.name)}** · {role}"
