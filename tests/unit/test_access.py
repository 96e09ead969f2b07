"""Who is who: accounts, operators, Hugging Face sign-in on a Space, guests, and when the page may go public."""

from __future__ import annotations

import hashlib
import hmac
import re
import stat
from types import SimpleNamespace

import pytest

from studio.backend.access import GUEST_KEY_FILE, AccessError, AccessPolicy
from studio.backend.visitors import LOCAL_OPERATOR, OpenPages, Visitor
from studio.config import StudioSettings
from studio.ui.launch import exposure_problem

NOT_A_SPACE: dict[str, str] = {}
SPACE_WITH_SIGN_IN = {"SPACE_ID": "someone/omni-studio", "OAUTH_CLIENT_ID": "client-id"}


def policy(environ=NOT_A_SPACE, **values) -> AccessPolicy:
    return AccessPolicy.from_settings(StudioSettings(_env_file=None, **values), environ)


@pytest.fixture(autouse=True)
def _outputs_in_tmp(tmp_path, monkeypatch):
    """The default outputs folder ("outputs", relative) lands in the test's own folder, never the checkout."""
    monkeypatch.chdir(tmp_path)


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


# Upper case and punctuation: none of it can turn up by chance in a lower-case hex digest.
MARK = "Zq9X_Lk2MPw7-RtY4UVb8NCd"


def test_a_guest_is_known_by_a_keyed_hash_of_their_browser_mark_never_the_mark_itself(tmp_path):
    outputs = tmp_path / "outputs"
    rules = policy(allow_anonymous=True, outputs_dir=outputs)
    guest = rules.visitor(browser=MARK)
    assert re.fullmatch(r"guest:[0-9a-f]{32}", guest.id), guest.id
    assert guest.name == f"guest {guest.id.removeprefix('guest:')[:6]}"
    for piece in (MARK[i : i + 4] for i in range(len(MARK) - 3)):  # not even four characters of the mark
        assert piece not in guest.id and piece not in guest.name
    key_file = outputs / GUEST_KEY_FILE
    key = bytes.fromhex(key_file.read_text().strip())
    assert len(key) >= 32
    assert guest.id == "guest:" + hmac.new(key, MARK.encode(), hashlib.sha256).hexdigest()[:32]
    assert key.hex() not in repr(rules) and str(key) not in repr(rules)

    # Only its owner reads the key, in a folder only its owner opens.
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700

    # A restart on the same outputs folder reads the same key: the guest keeps their history.
    assert policy(allow_anonymous=True, outputs_dir=outputs).visitor(browser=MARK) == guest
    # Another studio (another outputs folder) has its own key: the same mark is another guest there.
    elsewhere = policy(allow_anonymous=True, outputs_dir=tmp_path / "elsewhere").visitor(browser=MARK)
    assert elsewhere.id != guest.id


def test_the_guest_key_is_made_only_where_guests_are_allowed(tmp_path):
    policy(outputs_dir=tmp_path / "outputs")
    policy(auth=["alice:a"], outputs_dir=tmp_path / "outputs")
    assert not (tmp_path / "outputs").exists()


def test_a_guest_key_that_cannot_be_used_is_refused_with_the_reason(tmp_path):
    key_file = tmp_path / "outputs" / GUEST_KEY_FILE
    key_file.parent.mkdir(parents=True)
    key_file.write_text("")
    with pytest.raises(AccessError, match=r"guest-key.*(empty|not a key)"):
        policy(allow_anonymous=True, outputs_dir=tmp_path / "outputs")
    (tmp_path / "blocked").write_text("a file where the outputs folder should be")
    with pytest.raises(AccessError, match="cannot make or read the guest key"):
        policy(allow_anonymous=True, outputs_dir=tmp_path / "blocked")


def test_a_caller_without_the_cookie_is_known_by_a_hash_of_its_page_session_too(tmp_path):
    from studio.ui.identity import PageAccess

    access = PageAccess(policy(allow_anonymous=True, outputs_dir=tmp_path / "outputs"))
    session = "Sess10nHashXYZ"
    request = SimpleNamespace(cookies={}, session_hash=session, username=None)
    guest = access.visitor(request)
    assert re.fullmatch(r"guest:[0-9a-f]{32}", guest.id)
    assert session not in guest.id and session[:6] not in guest.name and "session" not in guest.id
    assert access.visitor(SimpleNamespace(cookies={}, session_hash=session, username=None)) == guest
    other = access.visitor(SimpleNamespace(cookies={}, session_hash="Another0ne", username=None))
    assert other.id != guest.id


@pytest.mark.parametrize("accounts", [{"auth": ["a:b"]}, {"auth_file": "accounts"}])
def test_accounts_and_guests_together_are_refused_at_start_with_the_reason(accounts, tmp_path):
    (tmp_path / "accounts").write_text("carol:c-pass\n")
    with pytest.raises(AccessError, match="--allow-anonymous and --auth cannot be used together: ") as refused:
        policy(allow_anonymous=True, **accounts)
    assert "guests" in str(refused.value)
    assert not (tmp_path / "outputs").exists()  # refused before anything was written


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
    monkeypatch.delenv("SPACE_ID", raising=False)  # the outputs folder: the test's own (the fixture above)
    settings = StudioSettings(_env_file=None, **values)
    problem = exposure_problem(settings, AccessPolicy.from_settings(settings, NOT_A_SPACE))
    assert (problem is None) == allowed


def test_a_visitor_with_two_pages_closes_their_last_one_only_once_both_are_closed():
    pages, alice = OpenPages(), Visitor(id="user:alice", name="alice")
    pages.opened(alice, "tab-1")
    pages.opened(alice, "tab-2")
    assert not pages.closed(alice, "tab-1")
    assert pages.closed(alice, "tab-2") and pages.count(alice) == 0
