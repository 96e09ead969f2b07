"""The gateway's API keys: the key file's lines, keys kept as their digests, `omni-studio keys add`, a file read
again when it changes, and wrong keys counted in the sign-in's ledger until the address is locked out."""

from __future__ import annotations

import os
import stat

import pytest

from studio.backend.face import LOCAL_OPERATOR, AccessPolicy
from studio.cli import main
from studio.gateway.callers import CallerRefused, GatewayAccess
from studio.gateway.keys import KeyFile, KeyFileError, KeyRing, digest_of
from studio.ui.sign_in_limit import SignInLedger

KEY = "a-long-enough-key-0123"


def test_the_file_takes_keys_and_digests_and_skips_comments():
    text = f"# programs\n\nalice:{KEY}\nbob:sha256:{digest_of('bobs-own-key-456789').upper()}\n"
    ring = KeyRing.parse(text)
    assert ring.user_of(KEY) == "alice"
    assert ring.user_of("bobs-own-key-456789") == "bob"
    assert ring.user_of("someone-elses-key-0000") is None
    assert KEY not in repr(ring)  # only digests are kept
    assert ring.users == {"alice", "bob"}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("alice", "USER:KEY"),
        (":" + KEY, "USER:KEY"),
        ("alice:short", "shorter than 16"),
        ("alice:sha256:abc", "64 hex digits"),
        (f"alice:{KEY}\nbob:{KEY}", "line 3: the key of line 2 is given again"),
    ],
)
def test_a_line_that_is_no_key_is_refused_with_its_number(line, said):
    with pytest.raises(KeyFileError) as refused:
        KeyRing.parse(f"# keys\n{line}\n")
    assert said in str(refused.value) and "line 2" in str(refused.value)


def test_keys_add_prints_a_key_once_and_keeps_its_digest(tmp_path, capsys):
    path = tmp_path / "keys.txt"
    assert main(["keys", "add", "alice", "--api-key-file", str(path)]) == 0
    key = capsys.readouterr().out.strip()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert key not in path.read_text() and path.read_text().startswith("alice:sha256:")
    assert main(["keys", "add", "alice", "--api-key-file", str(path)]) == 0
    second = capsys.readouterr().out.strip()
    ring = KeyRing.read(path)
    assert ring.user_of(key) == ring.user_of(second) == "alice" and key != second
    assert main(["keys", "add", "bad:name", "--api-key-file", str(path)]) == 2


def test_a_running_studio_reads_the_file_again_when_it_changes(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(f"alice:{KEY}\n")
    keys = KeyFile(path)
    path.write_text(f"alice:{KEY}\nbob:bobs-own-key-456789\n")
    os.utime(path, ns=(1, 1))  # a change the clock's grain could hide
    assert keys.current().user_of("bobs-own-key-456789") == "bob"
    path.write_text("not a key\n")
    assert keys.current().user_of(KEY) == "alice" and "line 1" in (keys.problem or "")


def access(tmp_path, **policy) -> GatewayAccess:
    path = tmp_path / "keys.txt"
    path.write_text(f"alice:{KEY}\nolga:olgas-own-key-98765\n")
    ledger = SignInLedger(address_max_failures=3, first_lock_s=30)
    return GatewayAccess(AccessPolicy(**policy), KeyFile(path), ledger, local_operator_without_keys=False)


def test_a_key_is_its_user_the_account_of_that_name(tmp_path):
    gateway = access(tmp_path, accounts=(("alice", "pw"), ("olga", "pw")), operators=frozenset({"olga"}))
    alice = gateway.caller(f"Bearer {KEY}", "10.0.0.1")
    assert alice.id == gateway.policy.visitor(user="alice").id == "user:alice" and not alice.operator
    assert gateway.caller("Bearer olgas-own-key-98765", "10.0.0.1").operator


def test_wrong_keys_lock_the_address_out_and_a_missing_key_is_no_guess(tmp_path):
    gateway = access(tmp_path)
    for _ in range(5):
        with pytest.raises(CallerRefused) as missing:
            gateway.caller(None, "10.0.0.2")
        assert missing.value.status == 401
    for _ in range(3):
        with pytest.raises(CallerRefused) as wrong:
            gateway.caller("Bearer not-a-key-of-this-studio", "10.0.0.2")
        assert wrong.value.status == 401
    with pytest.raises(CallerRefused) as locked:
        gateway.caller(f"Bearer {KEY}", "10.0.0.2")  # even the right key, from the address that guessed
    assert locked.value.status == 429 and int(locked.value.headers["Retry-After"]) > 0
    assert gateway.caller(f"Bearer {KEY}", "10.0.0.3").name == "alice"  # another address is not locked


def test_without_a_key_file_only_a_studio_without_sign_in_on_loopback_answers(tmp_path):
    ledger = SignInLedger()
    local = GatewayAccess(AccessPolicy(), None, ledger, local_operator_without_keys=True)
    assert local.caller(None, "127.0.0.1", host="127.0.0.1:7860") == LOCAL_OPERATOR
    assert local.caller(None, "127.0.0.1", host="[::1]:7860") == LOCAL_OPERATOR
    for host, cross_site in (("127.0.0.1:7860", True), ("rebound.example:7860", False)):
        with pytest.raises(CallerRefused) as page:
            local.caller(None, "127.0.0.1", host=host, cross_site=cross_site)
        assert page.value.status == 403
    closed = GatewayAccess(AccessPolicy(accounts=(("alice", "pw"),)), None, ledger, local_operator_without_keys=False)
    with pytest.raises(CallerRefused) as refused:
        closed.caller(f"Bearer {KEY}", "127.0.0.1")
    assert refused.value.status == 401 and "--api-key-file" in refused.value.message
