"""A visitor's image URL may not make a server fetch from inside its network (server-side request forgery): the
URL is read as resolvers read it and its host's addresses are checked before anything is sent. No test here sends
anything: names are resolved by a resolver the test gives (or /etc/hosts' localhost), and every URL is refused
before any connection."""

from __future__ import annotations

import asyncio
import socket

import pytest
from pydantic import ValidationError

from studio.backend.controller import StudioController
from studio.backend.runs.image_urls import image_url_refusal, literal_address
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.supervisor import free_port
from studio.backend.visitors import Visitor
from studio.ui import handlers
from tests.conftest import engine_settings

# The probe's URLs: each reached the server as the request's image_reference.
INTERNAL = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://localhost:6379/",
    "http://10.0.0.1/admin",
    "http://0x7f000001/",
    "http://[::1]/",
]
NUMERIC_FORMS = {  # how resolvers read a host written as a number
    "http://2130706433/": "127.0.0.1",
    "http://127.1/": "127.0.0.1",
    "http://0177.0.0.1/": "127.0.0.1",
    "http://0x7f.0.0.1/": "127.0.0.1",
    "http://[::ffff:127.0.0.1]/": "::ffff:7f00:1",
    "http://[::ffff:a9fe:a9fe]/": "::ffff:a9fe:a9fe",
    "http://127.0.0.1./": "127.0.0.1",
}


def no_lookup(host: str, port: int | None) -> list[str]:
    raise AssertionError(f"{host} was looked up: a host written as an address needs no lookup")


def answers(*addresses: str):
    def resolve(host: str, port: int | None) -> list[str]:
        return list(addresses)

    return resolve


@pytest.fixture(autouse=True)
def nothing_is_sent(monkeypatch):
    """Any connection attempt fails the test: the check reads and resolves, never connects."""

    def refuse(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.mark.parametrize("url", INTERNAL)
def test_the_probes_internal_urls_are_refused(url):
    resolve = answers("127.0.0.1", "::1") if "localhost" in url else no_lookup
    refusal = image_url_refusal(url, resolve=resolve)
    assert refusal is not None and "address" in refusal and "--allow-private-image-urls" in refusal, refusal


@pytest.mark.parametrize(("url", "address"), NUMERIC_FORMS.items())
def test_numeric_hosts_are_read_as_resolvers_read_them(url, address):
    refusal = image_url_refusal(url, resolve=no_lookup)
    assert refusal is not None and f"{address})" in refusal, refusal


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("169.254.169.254", "link-local"),
        ("127.0.0.2", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "non-public"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("[fe80::1]", "link-local"),
        ("[fc00::1]", "private"),
        ("[ff02::1]", "multicast"),
        ("[::]", "unspecified"),
        ("[64:ff9b::a9fe:a9fe]", "link-local"),  # NAT64 to 169.254.169.254
        ("[2002:7f00:1::]", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_each_kind_of_internal_address_is_named(host, kind):
    refusal = image_url_refusal(f"http://{host}/x.png", resolve=no_lookup)
    assert refusal is not None and f" {kind} address" in refusal, refusal


def test_a_name_is_refused_where_any_address_it_resolves_to_is_internal():
    url = "https://images.example/cat.png"
    assert image_url_refusal(url, resolve=answers("93.184.215.14")) is None
    assert image_url_refusal(url, resolve=answers("2606:2800:21f:cb07:6820:80da:af6b:8b2c")) is None
    mixed = image_url_refusal(url, resolve=answers("93.184.215.14", "10.9.8.7"))
    assert mixed is not None and "images.example, at 10.9.8.7" in mixed
    assert "private" in (image_url_refusal(url, resolve=answers("::ffff:10.0.0.1")) or "")


def test_a_name_that_does_not_resolve_or_takes_too_long_is_refused():
    def fails(host: str, port: int | None) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def hangs(host: str, port: int | None) -> list[str]:
        raise TimeoutError

    assert "does not resolve" in (image_url_refusal("http://nowhere.invalid/x.png", resolve=fails) or "")
    assert "did not resolve within" in (image_url_refusal("http://slow.example/x.png", resolve=hangs) or "")


def test_the_systems_resolver_finds_localhost_internal():
    # /etc/hosts answers localhost: no query leaves the machine.
    refusal = image_url_refusal("http://localhost:6379/")
    assert refusal is not None and "loopback address (localhost, at " in refusal


def test_credentials_in_the_url_are_refused_whatever_the_setting():
    url = "http://user:pass@127.0.0.1:22/"
    for allow_private in (False, True):
        refusal = image_url_refusal(url, allow_private, resolve=no_lookup)
        assert refusal is not None and "user name or password" in refusal
    with pytest.raises(ValidationError) as caught:
        RunSpec(prompts=["a cat"], image_url="https://me:secret@images.example/cat.png")
    (problem,) = caught.value.errors()
    assert problem["loc"] == ("image_url",) and "user name or password" in problem["msg"]


def test_the_operators_setting_allows_private_addresses():
    assert image_url_refusal("http://10.0.0.1/admin", allow_private=True, resolve=no_lookup) is None
    assert image_url_refusal("http://localhost:8000/x.png", allow_private=True, resolve=no_lookup) is None


def test_only_numbers_are_read_as_addresses():
    assert literal_address("0x7f000001") is not None and literal_address("127.1") is not None
    for name in ("images.example", "deadbeef", "0x7f000001.example", "1e100.net", "256.256.256.256.1"):
        assert literal_address(name) is None, name


# ---- through the studio's run path ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def remote_controller(tmp_path_factory):
    """A studio attached to a server that takes image URLs (a vLLM-Omni server, at a loopback port where none
    listens: nothing is to reach it)."""
    outputs = tmp_path_factory.mktemp("image-urls") / "outputs"
    settings = engine_settings(
        engine="remote", remote_urls=[f"http://127.0.0.1:{free_port()}"], outputs_dir=outputs, server_wait_s=0
    )
    controller = StudioController(settings)
    yield controller
    controller.close()


BOB = Visitor(id="bob", name="bob")
FORM = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "copies": 1, "concurrency": 1}


@pytest.mark.parametrize("url", [*INTERNAL, "http://user:pass@127.0.0.1:22/"])
def test_a_visitors_internal_image_url_is_refused_naming_the_field_and_queues_nothing(remote_controller, url):
    form = {**FORM, "prompts": "a red circle", "image_url": url}
    submitted = asyncio.run(handlers.submit_run(remote_controller, form, BOB))
    assert submitted.run is None and submitted.refusal is not None
    assert submitted.refusal.startswith("image URL ") and ("address" in submitted.refusal), submitted.refusal
    assert remote_controller.board.runs == [] and remote_controller.store.requests_since("bob", 0) == 0
