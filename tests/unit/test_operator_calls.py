"""The operator endpoints' guard on its own: in front of a small Gradio app's real routes (its queue not running: a
call Gradio takes is answered with an event id), with accounts (alice an operator, bob a visitor), with guests, and
with no sign-in; and the studio's list of operator endpoints against the page's own events (the studio's run in
tests/integration/test_api_listing.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import pytest
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from studio.backend.access import AccessPolicy
from studio.ui.call_routes import CallBody
from studio.ui.identity import PageAccess
from studio.ui.operator_calls import OPERATOR_APIS, OperatorCalls, fn_index_of, refusal, visitors_listing

ACCOUNTS = (("alice", "alice-pw"), ("bob", "bob-pw"))
WITH_ACCOUNTS = AccessPolicy(accounts=ACCOUNTS, operators=frozenset({"alice"}), everyone_operator=False)
GUESTS = AccessPolicy(allow_anonymous=True, everyone_operator=False)
NO_SIGN_IN = AccessPolicy()  # the one person at the keyboard: the operator


def small_page() -> gr.Blocks:
    """An operator endpoint and a visitor's, each taking a radio's value (Gradio checks it is one of its choices)."""
    with gr.Blocks() as demo:
        choice = gr.Radio(["forced", "optional"], value="forced")
        shown = gr.Textbox()
        gr.Button("Apply").click(lambda value: value, inputs=choice, outputs=shown, api_name="sharing")
        gr.Button("History").click(lambda value: value, inputs=choice, outputs=shown, api_name="history")
    return demo.queue()


@contextlib.contextmanager
def served(policy: AccessPolicy, user: str | None = None) -> Iterator[tuple[TestClient, gr.Blocks]]:
    demo = small_page()
    demo.auth = list(policy.accounts) or None
    demo.auth_message = None  # what launch() sets beside auth
    middleware = [Middleware(OperatorCalls, access=PageAccess(policy), apis=frozenset({"sharing"}))]
    app = gr.routes.App.create_app(demo, app_kwargs={"middleware": middleware})
    with TestClient(app) as client:
        if user is not None:
            signed_in = client.post("/login", data={"username": user, "password": dict(ACCOUNTS)[user]})
            assert signed_in.status_code == 200, signed_in.text
        yield client, demo


def fn_index(demo: gr.Blocks, api: str) -> int:
    return next(index for index, fn in demo.fns.items() if fn.api_name == api)


def calls(demo: gr.Blocks, value: str) -> list[tuple[str, dict]]:
    """Every way to call the operator endpoint: by its name (each route) and by its event's index."""
    index = fn_index(demo, "sharing")
    return [
        ("/gradio_api/call/sharing", {"data": [value]}),
        ("/gradio_api/call/v2/sharing", {"visitor_guardrails": value}),
        ("/gradio_api/run/sharing", {"data": [value]}),
        ("/gradio_api/api/sharing/", {"data": [value]}),
        ("/gradio_api/queue/join", {"data": [value], "fn_index": index, "session_hash": "s1", "trigger_id": 0}),
        ("/gradio_api/queue/join", {"data": [value], "fn_index": str(index), "session_hash": "s2"}),
        # Gradio runs the event a body's index names, whatever the path says.
        ("/gradio_api/run/history", {"data": [value], "fn_index": index}),
    ]


@pytest.mark.parametrize("value", ["optional", "not one of the choices"])
def test_a_visitor_is_refused_every_way_of_calling_an_operator_endpoint_before_gradio_reads_it(value):
    with served(WITH_ACCOUNTS, "bob") as (client, demo):
        for path, body in calls(demo, value):
            answer = client.post(path, json=body)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json() == {"detail": refusal("sharing")}, path
        # The visitor's own endpoint is Gradio's to answer, as before.
        taken = client.post("/gradio_api/call/history", json={"data": ["optional"]})
        assert taken.status_code == 200 and taken.json()["event_id"]


def test_a_guest_and_a_caller_not_signed_in_are_refused_too():
    with served(GUESTS) as (client, demo):
        client.cookies.set("omni-studio-browser", "a-guests-browser")
        for path, body in calls(demo, "optional"):
            assert client.post(path, json=body).status_code == 403, path
    with served(WITH_ACCOUNTS) as (client, demo):
        assert client.post("/gradio_api/call/sharing", json={"data": ["optional"]}).status_code == 403


@pytest.mark.parametrize(("policy", "user"), [(WITH_ACCOUNTS, "alice"), (NO_SIGN_IN, None)])
def test_an_operator_calls_and_sees_them_as_before(policy, user):
    with served(policy, user) as (client, demo):
        taken = client.post("/gradio_api/call/sharing", json={"data": ["optional"]})
        assert taken.status_code == 200 and taken.json()["event_id"]
        index = fn_index(demo, "sharing")
        joined = client.post(
            "/gradio_api/queue/join", json={"data": ["optional"], "fn_index": index, "session_hash": "s"}
        )
        assert joined.status_code == 200 and joined.json()["event_id"]
        assert set(client.get("/gradio_api/info").json()["named_endpoints"]) == {"/sharing", "/history"}
        paths = client.get("/gradio_api/openapi.json").json()["paths"]
        assert "/gradio_api/call/v2/sharing" in paths and "/gradio_api/call/sharing/{event_id}" in paths


def test_a_visitors_listing_leaves_the_operator_endpoints_out():
    with served(WITH_ACCOUNTS, "bob") as (client, _):
        for path in ("/gradio_api/info", "/gradio_api/info/", "/gradio_api/info?all_endpoints=true"):
            answer = client.get(path)
            assert answer.status_code == 200 and answer.headers["content-length"] == str(len(answer.content))
            assert set(answer.json()["named_endpoints"]) == {"/history"}, path
        paths = client.get("/gradio_api/openapi.json").json()["paths"]
        assert "/gradio_api/call/v2/history" in paths and "/gradio_api/call/history/{event_id}" in paths
        assert not [path for path in paths if "sharing" in path]
    with served(WITH_ACCOUNTS) as (client, _):  # not signed in: Gradio's own refusal, as before
        assert client.get("/gradio_api/info").status_code == 401


def test_a_listing_is_filtered_by_name_path_and_index():
    listing = {
        "named_endpoints": {"/bench": {}, "/history": {"x": 1}},
        "unnamed_endpoints": {"7": {}, "8": {}},
        "paths": {"/gradio_api/call/v2/bench": {}, "/gradio_api/call/bench/{event_id}": {}, "/gradio_api/upload": {}},
    }
    assert visitors_listing(listing, frozenset({"bench"}), {7}) == {
        "named_endpoints": {"/history": {"x": 1}},
        "unnamed_endpoints": {"8": {}},
        "paths": {"/gradio_api/upload": {}},
    }
    assert visitors_listing([1, 2], frozenset({"bench"}), set()) == [1, 2]


def test_an_event_index_is_read_as_gradio_reads_it():
    assert [fn_index_of(CallBody(b"", {"fn_index": value})) for value in (3, "3", 3.0, True, "x", None)] == [
        3,
        3,
        3,
        None,
        None,
        None,
    ]
    assert fn_index_of(CallBody(b"", ["not", "a", "dict"])) is None


def test_the_list_is_the_pages_named_events_that_require_an_operator(tmp_path: Path):
    """Every event of the page whose handler refuses visitors is on the list by its API name, the private ones (which a
    program can still call by name or index) too, and nothing else."""
    from studio.backend.controller import StudioController
    from studio.config import StudioSettings
    from studio.ui.page import build_page

    settings = StudioSettings(_env_file=None, outputs_dir=tmp_path / "outputs")
    controller = StudioController(settings)  # never started: the page is built, nothing runs
    try:
        demo = build_page(controller, PageAccess(AccessPolicy.from_settings(settings)))
        requiring = {
            fn.api_name for fn in demo.fns.values() if "require_operator" in getattr(fn.fn, "__code__", None).co_names
        }
    finally:
        controller.close()
    assert requiring == OPERATOR_APIS
