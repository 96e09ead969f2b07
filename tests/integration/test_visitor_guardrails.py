"""The guardrail on a real studio with sign-in (alice an operator, bob a visitor) on the embedded engine: bob's
"gore" with guardrails off is still checked and blocked by the engine (no video), and the run says the guardrail
was kept on; look-alike letters are blocked too; the operator may switch it off, and may let visitors do so from
the Sharing form (visitor_guardrails = optional)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gradio_client import Client

from tests.browser.conftest import RunningStudio, start_studio, stop_studio

ACCOUNTS = {"alice": "pw1", "bob": "pw2"}
QUICK = {"tier": "256p", "aspect": "1:1", "frames": 5, "steps": 2, "seed": "1", "seed_policy": "fixed"}
RUN_TIMEOUT_S = 240.0
WAIT_S = 20.0  # each /wait_run call's own bound: repeated until the run ends


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> Iterator[RunningStudio]:
    folder = tmp_path_factory.mktemp("guardrails")
    accounts = [flag for user, password in ACCOUNTS.items() for flag in ("--auth", f"{user}:{password}")]
    running = start_studio(folder / "outputs", folder / "studio.log", *accounts, "--operator", "alice")
    yield running
    stop_studio(running)


def client(studio: RunningStudio, user: str) -> Client:
    return Client(studio.url, auth=(user, ACCOUNTS[user]), verbose=False)


def submit(who: Client, prompts: str, guardrails: bool) -> dict[str, Any]:
    return who.predict(prompts=prompts, guardrails=guardrails, **QUICK, api_name="/submit_run")


def finished(who: Client, record: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not record["finished"]:
        assert time.monotonic() < deadline, f"run {record['run_id']} still going after {RUN_TIMEOUT_S:g} s: {record}"
        record = who.predict(run_id=record["run_id"], timeout_s=WAIT_S, api_name="/wait_run")
    return record


def blocked(request: dict[str, Any]) -> bool:
    return request["state"] == "failed" and not request.get("video_url") and "guardrail" in (request["error"] or "")


def test_a_visitor_who_asks_the_guardrail_off_is_checked_all_the_same(studio):
    bob = client(studio, "bob")
    record = submit(bob, "gore", guardrails=False)
    assert "guardrails kept on" in (record["note"] or ""), record
    (request,) = finished(bob, record)["requests"]
    assert blocked(request), request


def test_look_alike_letters_are_blocked(studio):
    bob = client(studio, "bob")
    # Cherokee ᏀᎾᎡᎬ, Latin sideways o, Cyrillic Abkhasian che: one request each.
    record = finished(bob, submit(bob, "\u13c0\u13be\u13a1\u13ac\ng\u1d11re\ngor\u04bd", guardrails=True))
    assert len(record["requests"]) == 3 and all(blocked(request) for request in record["requests"]), record


def test_the_operator_may_switch_it_off_and_let_visitors_do_so(studio):
    alice, bob = client(studio, "alice"), client(studio, "bob")
    record = submit(alice, "gore", guardrails=False)
    assert "guardrails kept on" not in (record["note"] or "")
    (request,) = finished(alice, record)["requests"]
    assert request["state"] == "done" and request.get("video_url"), request

    # The operator's endpoints are not in a visitor's API listing: gradio_client takes the value by position.
    with pytest.raises(httpx.HTTPStatusError) as refused:
        bob.predict("optional", api_name="/sharing")
    assert refused.value.response.status_code == 403 and "only an operator" in refused.value.response.text
    applied = alice.predict(visitor_guardrails="optional", api_name="/sharing")
    assert "Per visitor: guardrails = optional" in applied, applied
    try:
        record = submit(bob, "gore", guardrails=False)
        assert "guardrails kept on" not in (record["note"] or "")
        (request,) = finished(bob, record)["requests"]
        assert request["state"] == "done" and request.get("video_url"), request
    finally:
        alice.predict(visitor_guardrails="forced", api_name="/sharing")
