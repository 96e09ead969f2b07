"""Who is who: accounts, operators, Hugging Face sign-in on a Space, guests, and when the page may go public."""

from __future__ import annotations

import pytest

from studio.backend.access import AccessError, AccessPolicy
from studio.backend.visitors import LOCAL_OPERATOR, OpenPages, Visitor
from studio.config import StudioSettings
from studio.ui.launch import exposure_problem

NOT_A_SPACE: dict[str, str] = {}
SPACE_WITH_SIGN_IN = {"SPACE_ID": "someone/omni-studio", "OAUTH_CLIENT_ID": "client-id"}


def policy(environ=NOT_A_SPACE, **values) -> AccessPolicy:
    return AccessPolicy.from_settings(StudioSettings(_env_file=None, **values), environ)


def test_accounts_are_visitors_and_the_first_is_the_operator_unless_one_is_named(tmp_path):
    rules = policy(auth=["alice:a-pass", "bob:b:pass"])
    alice, bob = rules.visitor(user="alice"), rules.visitor(user="bob")
    assert alice.operator and not bob.operator and alice.id != bob.id
    assert rules.accounts == (("alice", "a-pass"), ("bob", "b:pass"))  # a password may hold a colon
    assert rules.visitor(user=None, browser="x") is None  # no account, no entry: not even as a guest

    named = policy(auth=["alice:a", "bob:b"], operators=["bob"])
    assert named.visitor(user="bob").operator and not named.visitor(user="alice").operator

    accounts = tmp_path / "accounts"
    accounts.write_text("# the team\ncarol:c-pass\n\n  dave:d-pass  \n")
    from_file = policy(auth_file=accounts, operators=["dave"])
    assert [user for user, _ in from_file.accounts] == ["carol", "dave"]
    assert from_file.visitor(user="dave").operator


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"auth": ["alice:a"], "operators": ["mallory"]}, "--operator mallory names no account"),
        ({"auth": ["alice:a", "alice:b"]}, "the account 'alice' is given twice"),
        ({"auth": ["alice"]}, "an account is user:pass"),
        ({"auth_file": "/nonexistent/accounts"}, "--auth-file /nonexistent/accounts: cannot read it"),
    ],
)
def test_accounts_that_do_not_make_sense_are_refused_with_the_reason(values, message):
    with pytest.raises(AccessError, match=message):
        policy(**values)


def test_a_bad_line_of_the_accounts_file_is_named(tmp_path):
    accounts = tmp_path / "accounts"
    accounts.write_text("alice:a\nbob-without-password\n")
    with pytest.raises(AccessError, match="line 2"):
        policy(auth_file=accounts)


def test_on_loopback_without_sign_in_the_person_at_the_keyboard_is_the_operator():
    assert policy().visitor(browser="any") == LOCAL_OPERATOR


def test_guests_are_each_their_own_visitor_and_never_operators():
    rules = policy(allow_anonymous=True)
    one, two = rules.visitor(browser="browser-one"), rules.visitor(browser="browser-two")
    assert one.id != two.id and not one.operator and not two.operator
    assert rules.visitor(browser="browser-one") == one  # the same browser stays the same visitor
    assert rules.visitor(browser="") is None


def test_on_a_space_visitors_sign_in_with_hugging_face_and_operators_come_from_the_env(monkeypatch):
    monkeypatch.setenv("OMNI_STUDIO_OPERATORS", "ada, grace")
    rules = policy(SPACE_WITH_SIGN_IN)
    assert rules.hf_sign_in and not rules.everyone_operator
    assert rules.visitor(hf_user="ada").operator and not rules.visitor(hf_user="linus").operator
    assert rules.visitor(browser="b") is None  # not signed in, no guests allowed
    assert "Sign in with Hugging Face" in rules.sign_in_message()
    guests = policy(SPACE_WITH_SIGN_IN, allow_anonymous=True)
    assert guests.visitor(browser="b") is not None and not guests.visitor(browser="b").operator


def test_a_space_without_sign_in_lets_no_one_in_unless_guests_are_allowed(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/omni-studio")
    rules = policy({"SPACE_ID": "someone/omni-studio"})
    assert rules.visitor(browser="b") is None
    assert "hf_oauth: true" in rules.sign_in_message() and "OMNI_STUDIO_ALLOW_ANONYMOUS" in rules.sign_in_message()


@pytest.mark.parametrize(
    ("values", "allowed"),
    [
        ({"share": True}, False),
        ({"host": "0.0.0.0"}, False),
        ({"host": "0.0.0.0", "auth": ["a:b"]}, True),
        ({"share": True, "allow_anonymous": True}, True),
        ({"share": True, "insecure": True}, True),
        ({}, True),
    ],
)
def test_going_public_needs_a_sign_in_guests_or_an_explicit_insecure(values, allowed, monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    settings = StudioSettings(_env_file=None, **values)
    problem = exposure_problem(settings, AccessPolicy.from_settings(settings, NOT_A_SPACE))
    assert (problem is None) == allowed


def test_a_visitor_with_two_pages_closes_their_last_one_only_once_both_are_closed():
    pages, alice = OpenPages(), Visitor(id="user:alice", name="alice")
    pages.opened(alice, "tab-1")
    pages.opened(alice, "tab-2")
    assert not pages.closed(alice, "tab-1")
    assert pages.closed(alice, "tab-2") and pages.count(alice) == 0
