"""Signing in and out only from the studio's own page (no cross-site request forgery of either).

Gradio signs a browser in at `POST /login` and out at `GET /logout`. Another site could send a form to the first
(the victim's browser signed in to an account the attacker chose, and what they make there is the attacker's to
see) or a link or image to the second (signed out at a stranger's whim). This middleware stands in front of both:
- `POST /login` and `POST /logout` whose `Origin` (or, without one, `Referer`) is another site are refused 403;
  a request with neither is a program's (gradio_client signs in that way), not a browser's, and passes;
- `GET /logout` never signs out: it answers a small page of the studio's own whose button posts the sign-out (its
  query, such as the Hugging Face button's `_target_url`, kept); a `POST /logout` from the studio's own page is
  handed to Gradio's sign-out route as the GET it expects.
"""

from __future__ import annotations

import html
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOGIN, LOGOUT = "/login", "/logout"
DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}
MAX_LOGOUT_BODY = 64 * 1024  # a sign-out form is a button; a larger body is not one

SIGN_OUT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Omni Studio: sign out</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: sans-serif; margin: 3em auto; max-width: 30em">
<h1>Sign out of Omni Studio?</h1>
<form method="post" action="{action}"><button type="submit">Sign out</button></form>
<p><a href="./">Back to the studio</a></p>
</body></html>
"""


def route_of(scope: Scope) -> str:
    """The request's path under the app's root, without repeated or trailing slashes, lower case."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/").lower() or "/"


def _host(netloc: str, scheme: str) -> str:
    """`netloc` lower case, without user info and without the scheme's default port."""
    netloc = netloc.rpartition("@")[2].lower()
    port = DEFAULT_PORTS.get(scheme)
    if port and netloc.endswith(f":{port}") and not netloc.endswith("]"):
        netloc = netloc[: -len(port) - 1]
    return netloc


def sender_of(headers: Headers) -> str | None:
    """The site a browser says a request comes from (`Origin`, else `Referer`), as host[:port]; "" where it says
    one that names no host (`Origin: null`: a sandboxed frame, a file); None where it says nothing (a program)."""
    said = headers.get("origin")
    if said is None:
        said = headers.get("referer")
        if said is None:
            return None
    parts = urlsplit(said.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        return ""
    return _host(parts.netloc, parts.scheme)


def own_hosts(scope: Scope, headers: Headers) -> set[str]:
    """The names this request reached the studio by: its Host, and the one a reverse proxy passed on (a form on
    another site cannot set that header, so believing it lets no other site in)."""
    scheme = scope.get("scheme", "http")
    names = {_host(headers.get("host", ""), scheme)}
    forwarded = headers.get("x-forwarded-host")
    if forwarded:
        proto = (headers.get("x-forwarded-proto") or scheme).split(",")[0].strip()
        names.add(_host(forwarded.split(",")[0].strip(), proto))
        names.add(_host(forwarded.split(",")[0].strip(), "https"))
    names.discard("")
    return names


def cross_site(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    sender = sender_of(headers)
    return sender is not None and sender not in own_hosts(scope, headers)


class SameOriginSignIn:
    """ASGI middleware in front of Gradio's `/login` and `/logout`; every other request passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, method = route_of(scope), scope.get("method")
        if route == LOGIN and method == "POST":
            if cross_site(scope):
                await PlainTextResponse("sign in from the studio's own page", 403)(scope, receive, send)
                return
        elif route == LOGOUT:
            if method in ("GET", "HEAD"):
                await self._confirm(scope, receive, send)
                return
            if method != "POST":
                await PlainTextResponse("sign out with the studio's button", 405, {"Allow": "GET, POST"})(
                    scope, receive, send
                )
                return
            if cross_site(scope):
                await PlainTextResponse("sign out from the studio's own page", 403)(scope, receive, send)
                return
            if not await self._drained(receive):
                await PlainTextResponse("a sign-out is a button, not a body", 413)(scope, receive, send)
                return
            # Gradio's sign-out route answers GET only.
            await self.app({**scope, "method": "GET"}, _empty_then(receive), send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _drained(receive: Receive) -> bool:
        """Read the form's body (the button sends none worth keeping); False where it is too large to be one."""
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return True
            size += len(message.get("body", b""))
            if size > MAX_LOGOUT_BODY:
                return False
            if not message.get("more_body", False):
                return True

    @staticmethod
    async def _confirm(scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"").decode("latin-1")
        action = "logout" + (f"?{query}" if query else "")
        page = SIGN_OUT_PAGE.format(action=html.escape(action, quote=True))
        await HTMLResponse(page, headers={"Cache-Control": "no-store"})(scope, receive, send)


def _empty_then(receive: Receive) -> Receive:
    """A body already read, given again as empty; then what the client sends next (its disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": b"", "more_body": False}

    return replay
