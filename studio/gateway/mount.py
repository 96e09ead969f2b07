"""The gateway on the studio's own port: an ASGI middleware that hands every request under /v1 to the gateway's app
and every other to the page's (Gradio's) routes, untouched.

It stands right behind the body limit (ui/body_limit.py: a form of POST /v1/videos within the page's upload
limit, any other body within a call's) and in front of the page's guards, which are Gradio's business: the file
guard refuses any path naming a studio request id (as /v1/videos/req_.../content does), the sign-in and session
guards know page sessions, not keys. The gateway guards itself: its keys, their failure limit, the visitors'
quotas.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/v1"
# The routes that take a multipart form with an image: their bodies are bounded as uploads are.
FORM_ROUTES = (f"{PREFIX}/videos", f"{PREFIX}/videos/sync")


def path_under_root(scope: Scope) -> str:
    """The request's path under the app's root (a proxy may serve the studio under a prefix)."""
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def gateway_path(scope: Scope) -> bool:
    path = path_under_root(scope)
    return path == PREFIX or path.startswith(PREFIX + "/")


class GatewayMount:
    def __init__(self, app: ASGIApp, *, gateway: ASGIApp) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and gateway_path(scope):
            await self.gateway(scope, receive, send)
            return
        await self.app(scope, receive, send)
