"""Guessing passwords at a real studio's sign-in (Gradio's `POST /login`, accounts from --auth): after a few
wrong ones the account is locked for a while, its right password too, and other accounts still sign in."""

from __future__ import annotations

import httpx
import pytest
from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio

WRONG = "not-the-password-41c9"


def test_wrong_passwords_lock_the_account_and_only_that_account(tmp_path):
    log = tmp_path / "studio.log"
    studio = start_studio(tmp_path / "outputs", log, "--auth", "alice:pw1", "--auth", "bob:pw2")
    try:
        with httpx.Client(base_url=studio.url, timeout=30) as web:

            def sign_in(user: str, password: str) -> httpx.Response:
                return web.post("/login", data={"username": user, "password": password})

            answers = [sign_in("alice", WRONG) for _ in range(6)]
            assert [a.status_code for a in answers] == [400] * 5 + [429]
            locked = answers[-1]
            assert "too many failed sign-ins for this account" in locked.json()["detail"]
            assert int(locked.headers["retry-after"]) >= 1
            right = sign_in("alice", "pw1")
            assert right.status_code == 429 and not any(c.startswith("access-token") for c in right.cookies)
            with pytest.raises(ValueError, match="Could not login"):
                Client(studio.url, auth=("alice", "pw1"), verbose=False)

            assert sign_in("bob", "pw2").status_code == 200
        bob = Client(studio.url, auth=("bob", "pw2"), verbose=False)
        bob.predict(show="mine", api_name="/history")  # signed in, the page's API answers bob
    finally:
        stop_studio(studio)
    said = log.read_text(errors="replace")
    assert "alice" in said and "locked out for" in said and WRONG not in said and "pw1" not in said
