"""Where a request comes from: uvicorn believes X-Forwarded-For from exactly the proxies the operator names (none by
default, and the Space's own network on a Space), and sign-in and sign-out are refused from other sites."""

from __future__ import annotations

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from studio.config import StudioSettings
from studio.hosting import Hardware, SpaceEnvironment, hosted_settings
from studio.ui.client_address import FORWARDED_ALLOW_IPS, client_address, trust_forwarded_from
from studio.ui.same_origin import SameOriginSignIn


async def where(request: Request) -> JSONResponse:
    return JSONResponse({"address": client_address(request.scope)})


def seen_from(peer: str, forwarded: str) -> str:
    """The address the studio reads for a request from `peer` with `X-Forwarded-For: forwarded`."""
    app = Starlette(routes=[Route("/", where)])
    config = uvicorn.Config(app, forwarded_allow_ips=None)  # as Gradio makes it: from the environment
    guarded = ProxyHeadersMiddleware(app, trusted_hosts=config.forwarded_allow_ips)
    with TestClient(guarded, client=(peer, 50000)) as client:
        return client.get("/", headers={"X-Forwarded-For": forwarded}).json()["address"]


def test_with_no_proxy_named_the_peer_is_the_address_even_from_loopback(monkeypatch):
    monkeypatch.setenv(FORWARDED_ALLOW_IPS, "")  # restored after the test, as it was
    monkeypatch.delenv(FORWARDED_ALLOW_IPS)
    assert seen_from("127.0.0.1", "198.51.100.7") == "198.51.100.7"  # uvicorn's own default: loopback trusted
    assert trust_forwarded_from([]) == ""
    assert seen_from("127.0.0.1", "198.51.100.7") == "127.0.0.1"
    assert seen_from("10.0.0.5", "198.51.100.7") == "10.0.0.5"


def test_a_named_proxy_is_believed_and_a_clients_own_entry_is_not(monkeypatch):
    monkeypatch.setenv(FORWARDED_ALLOW_IPS, "")  # restored after the test, as it was
    monkeypatch.delenv(FORWARDED_ALLOW_IPS)
    trust_forwarded_from(["10.0.0.0/8", " 192.168.1.1 "])
    # The proxy appends the address it saw; what the client wrote itself stays to the left, unread.
    assert seen_from("10.16.3.80", "203.0.113.66, 198.51.100.7") == "198.51.100.7"
    assert seen_from("192.168.1.1", "198.51.100.7") == "198.51.100.7"
    assert seen_from("198.51.100.9", "203.0.113.66") == "198.51.100.9"  # not a named proxy


def test_on_a_space_the_spaces_proxy_network_is_trusted_unless_the_operator_says_otherwise():
    space = SpaceEnvironment(SPACE_ID="someone/studio")
    hosted = hosted_settings(StudioSettings(_env_file=None), space, Hardware(gpus=0, cpus=2))
    assert "10.0.0.0/8" in hosted.settings.forwarded_allow_ips and "*" not in hosted.settings.forwarded_allow_ips
    assert any("X-Forwarded-For" in note for note in hosted.notes)
    mine = StudioSettings(_env_file=None, forwarded_allow_ips=["172.20.0.2"])
    assert hosted_settings(mine, space, Hardware(gpus=0, cpus=2)).settings.forwarded_allow_ips == ["172.20.0.2"]
    assert hosted_settings(StudioSettings(_env_file=None), SpaceEnvironment()).settings.forwarded_allow_ips == []


class Gradio:
    """Stands for Gradio's /login (POST) and /logout (GET only), recording what reached them."""

    def __init__(self) -> None:
        self.reached: list[str] = []

        async def login(request: Request) -> PlainTextResponse:
            self.reached.append(f"login {(await request.form()).get('username')}")
            return PlainTextResponse("signed in")

        async def logout(request: Request) -> PlainTextResponse:
            self.reached.append(f"logout {request.url.query}")
            return PlainTextResponse("signed out")

        self.app = Starlette(
            routes=[Route("/login", login, methods=["POST"]), Route("/logout", logout, methods=["GET"])]
        )


def test_sign_in_and_sign_out_from_another_site_are_refused_and_programs_still_sign_in():
    gradio = Gradio()
    client = TestClient(SameOriginSignIn(gradio.app), base_url="http://studio.example:7860")
    form = {"username": "alice", "password": "pw"}
    assert client.post("/login", data=form, headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.post("/login/", data=form, headers={"Referer": "https://evil.example/x"}).status_code == 403
    assert client.post("/login", data=form, headers={"Origin": "null"}).status_code == 403
    assert gradio.reached == []
    assert client.post("/login", data=form).status_code == 200  # a program (gradio_client): no Origin
    assert client.post("/login", data=form, headers={"Origin": "http://studio.example:7860"}).status_code == 200
    behind_proxy = {"Origin": "https://studio.hf.space", "X-Forwarded-Host": "studio.hf.space"}
    assert client.post("/login", data=form, headers=behind_proxy).status_code == 200
    assert gradio.reached == ["login alice"] * 3

    # A link or an image cannot sign out: GET shows a page whose button posts, with the query kept.
    page = client.get("/logout?_target_url=/x")
    assert page.status_code == 200 and 'method="post" action="logout?_target_url=/x"' in page.text
    assert client.post("/logout", headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.post("/logout", headers={"Referer": "https://evil.example/"}).status_code == 403
    assert len(gradio.reached) == 3
    own = client.post("/logout?_target_url=/x", headers={"Origin": "http://studio.example:7860"})
    assert own.text == "signed out" and gradio.reached[-1] == "logout _target_url=/x"
    assert client.put("/logout").status_code == 405
