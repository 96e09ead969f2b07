"""Who is asking, at every event of the page: the account signed in to the page (Gradio's login), the Hugging
Face user signed in on a Space, or only a browser (a guest); and what they may see and do.

Every event resolves its visitor from its own request, so Gradio's API (gradio_client, or a hand-made call of any
endpoint) is held to the same rules as the page's buttons.
"""

from __future__ import annotations

import html

import gradio as gr

from studio.backend.face import LOCAL_OPERATOR, AccessPolicy, Visitor
from studio.ui.file_guard import BROWSER_COOKIE, VisitorBook

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
    def __init__(self, policy: AccessPolicy, book: VisitorBook | None = None) -> None:
        self.policy = policy
        self.book = book or VisitorBook()

    def visitor(self, request: gr.Request | None, profile: gr.OAuthProfile | None = None) -> Visitor | None:
        user = getattr(request, "username", None) if request is not None else None
        hf_user = getattr(profile, "username", None) if profile is not None else None
        browser = browser_of(request)
        visitor = self.policy.visitor(user=user, hf_user=hf_user, browser=browser)
        cookies = (getattr(request, "cookies", None) or {}) if request is not None else {}
        if visitor is not None and cookies.get(BROWSER_COOKIE):
            self.book.note(cookies[BROWSER_COOKIE], visitor)  # the file guard reads it
        return visitor

    def require(self, request: gr.Request | None, profile: gr.OAuthProfile | None = None) -> Visitor:
        """The visitor asking; anyone not signed in is told how to, and nothing happens."""
        visitor = self.visitor(request, profile)
        if visitor is None:
            raise gr.Error(self.policy.sign_in_message(), title="Sign in", print_exception=False)
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
        return f"Signed in as **{html.escape(visitor.name)}** · {role}"
