"""The page's API as visitors and operators see it, on a real studio with accounts (alice an operator, bob a
visitor): bob's API listing names no operator endpoint and alice's names them all; bob's call of one with a value
outside its choices is refused with the reason before Gradio reads it, by every route, and the studio's log gains
no traceback; alice calls it by keyword as before."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest
from gradio_client import Client

from studio.ui.operator_calls import OPERATOR_APIS, refusal
from tests.browser.conftest import RunningStudio, start_studio, stop_studio

ACCOUNTS = {"alice": "alice-pw", "bob": "bob-pw"}
OPERATOR_PATHS = {f"/{api}" for api in OPERATOR_APIS}


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("api-listing")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "alice")
    yield running
    stop_studio(running)


@contextlib.contextmanager
def signed_in(studio: RunningStudio, user: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=studio.url, timeout=60) as http:
        answer = http.post("/login", data={"username": user, "password": ACCOUNTS[user]})
        assert answer.status_code == 200, answer.text
        yield http


def listed(http: httpx.Client, path: str = "/gradio_api/info") -> set[str]:
    answer = http.get(path)
    assert answer.status_code == 200, answer.text[:300]
    return set(answer.json()["named_endpoints"])


def listed_operator_paths(http: httpx.Client) -> set[str]:
    """The operator endpoints the page lists at all: those of its events that are not private (the page's own
    steps, such as a confirmation's question, are listed to no one, and refused to visitors all the same)."""
    dependencies = http.get("/config").json()["dependencies"]
    public = {d["api_name"] for d in dependencies if d.get("api_name") and d.get("api_visibility") != "private"}
    return {f"/{api}" for api in OPERATOR_APIS & public}


def test_a_visitors_listing_names_no_operator_endpoint_and_an_operators_names_them_all(studio):
    with signed_in(studio, "bob") as bob, signed_in(studio, "alice") as alice:
        operator_paths = listed_operator_paths(alice)
        assert {"/bench", "/sharing", "/stop_server"} <= operator_paths
        for path in ("/gradio_api/info", "/gradio_api/info?all_endpoints=true"):
            seen = listed(bob, path)
            assert {"/generate", "/history", "/submit_run"} <= seen and not seen & OPERATOR_PATHS, path
            assert listed(alice, path) >= operator_paths, path
        paths = bob.get("/gradio_api/openapi.json").json()["paths"]
        # `/gradio_api/call/v2/<api>` and `/gradio_api/call/<api>/{event_id}`: the API each is about.
        apis = {path.removeprefix("/gradio_api/call/").removeprefix("v2/").split("/")[0] for path in paths}
        assert "history" in apis and not apis & OPERATOR_APIS
        assert "/gradio_api/call/v2/bench" in alice.get("/gradio_api/openapi.json").json()["paths"]
    # What gradio_client shows each of them ("Use via API" reads the same listing).
    visitor = Client(studio.url, auth=("bob", ACCOUNTS["bob"]), verbose=False)
    assert not set(visitor.view_api(return_format="dict", print_info=False)["named_endpoints"]) & OPERATOR_PATHS
    operator = Client(studio.url, auth=("alice", ACCOUNTS["alice"]), verbose=False)
    assert set(operator.view_api(return_format="dict", print_info=False)["named_endpoints"]) >= operator_paths


def test_a_visitors_value_outside_the_choices_is_refused_before_gradio_reads_it(studio):
    with signed_in(studio, "alice") as alice:
        parameters = alice.get("/gradio_api/info").json()["named_endpoints"]["/sharing"]["parameters"]
        fn_index = next(d["id"] for d in alice.get("/config").json()["dependencies"] if d.get("api_name") == "sharing")
    # The form as it stands, the visitors' guardrails (a radio: forced or optional) set to neither.
    values = {p["parameter_name"]: p.get("parameter_default") for p in parameters}
    assert "visitor_guardrails" in values
    data = list({**values, "visitor_guardrails": "whatever I like"}.values())
    with signed_in(studio, "bob") as bob:
        answers = [
            bob.post("/gradio_api/call/sharing", json={"data": data}),
            bob.post("/gradio_api/run/sharing", json={"data": data}),
            bob.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index, "session_hash": "bob-1"}),
        ]
    for answer in answers:
        assert answer.status_code == 403 and answer.json() == {"detail": refusal("sharing")}, answer.text
    # gradio_client maps no keywords for an endpoint its listing lacks: the values go by position, refused alike.
    visitor = Client(studio.url, auth=("bob", ACCOUNTS["bob"]), verbose=False)
    with pytest.raises(httpx.HTTPStatusError) as refused:
        visitor.predict(*data, api_name="/sharing")
    assert refused.value.response.status_code == 403 and refusal("sharing") in refused.value.response.text

    # The operator calls it by keyword as before; once her call is answered, the log is read.
    operator = Client(studio.url, auth=("alice", ACCOUNTS["alice"]), verbose=False)
    assert "Per visitor: guardrails = forced" in operator.predict(visitor_guardrails="forced", api_name="/sharing")
    log = studio.log.read_text(errors="replace")
    assert "Traceback" not in log and "whatever I like" not in log, log[-3000:]
