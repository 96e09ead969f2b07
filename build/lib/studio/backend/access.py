"""Who may do what: the page's accounts, its operators, and whether strangers may generate.

The page tells the studio who is asking (an account's user name, a Hugging Face user on a Space, or only a
browser); this module turns that into a Visitor, or into None where the person must sign in first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.config import StudioSettings


class AccessError(ValueError):
    """The accounts or operators given do not make sense together."""


def parse_account(text: str, where: str) -> tuple[str, str]:
    user, sep, password = text.strip().partition(":")
    if not sep or not user.strip() or not password:
        raise AccessError(f"{where}: an account is user:pass, got {text.strip()[:40]!r}")
    return user.strip(), password


def read_accounts(settings: StudioSettings) -> list[tuple[str, str]]:
    """The accounts of --auth and of --auth-file's lines, in that order; one user named twice is refused."""
    accounts = [parse_account(secret.get_secret_value(), "--auth") for secret in settings.auth]
    if settings.auth_file is not None:
        try:
            lines = Path(settings.auth_file).read_text().splitlines()
        except OSError as exc:
            raise AccessError(f"--auth-file {settings.auth_file}: cannot read it ({exc.strerror or exc})") from exc
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                accounts.append(parse_account(line, f"--auth-file {settings.auth_file} line {number}"))
    users = [user for user, _ in accounts]
    twice = sorted({user for user in users if users.count(user) > 1})
    if twice:
        raise AccessError(f"the account {twice[0]!r} is given twice")
    return accounts


def on_space(environ: Mapping[str, str] = os.environ) -> bool:
    return bool(environ.get("SPACE_ID"))


def hf_sign_in_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """A Space with `hf_oauth: true` in its front matter gets these from the Hub; without them no one can sign in."""
    return on_space(environ) and bool(environ.get("OAUTH_CLIENT_ID"))


@dataclass(frozen=True)
class AccessPolicy:
    accounts: tuple[tuple[str, str], ...] = ()
    operators: frozenset[str] = frozenset()
    hf_sign_in: bool = False  # visitors sign in with Hugging Face (a Space with OAuth)
    allow_anonymous: bool = False
    # No sign-in of any kind: the one person at the keyboard (loopback), or a trusted network (--insecure).
    everyone_operator: bool = True

    @classmethod
    def from_settings(cls, settings: StudioSettings, environ: Mapping[str, str] = os.environ) -> AccessPolicy:
        accounts = tuple(read_accounts(settings))
        hf = hf_sign_in_configured(environ)
        operators = [name.strip() for name in settings.operators if name.strip()]
        if accounts:
            names = {user for user, _ in accounts}
            unknown = [name for name in operators if name not in names]
            if unknown:
                raise AccessError(f"--operator {unknown[0]} names no account (--auth / --auth-file)")
            operators = operators or [accounts[0][0]]
        return cls(
            accounts=accounts,
            operators=frozenset(operators),
            hf_sign_in=hf and not accounts,
            allow_anonymous=settings.allow_anonymous,
            everyone_operator=not accounts and not on_space(environ) and not settings.allow_anonymous,
        )

    @property
    def signs_in(self) -> bool:
        return bool(self.accounts) or self.hf_sign_in

    def visitor(self, user: str | None = None, hf_user: str | None = None, browser: str = "") -> Visitor | None:
        """The visitor asking: `user` is the account signed in to the page, `hf_user` the Hugging Face user
        signed in on a Space, `browser` what tells one browser from another. None: they must sign in first."""
        if self.accounts:
            # The page's login lets no one in without an account; a missing name is a caller that got past it.
            return Visitor(id=f"user:{user}", name=user, operator=user in self.operators) if user else None
        if self.hf_sign_in and hf_user:
            return Visitor(id=f"hf:{hf_user}", name=hf_user, operator=hf_user in self.operators)
        if self.everyone_operator:
            return LOCAL_OPERATOR
        if self.allow_anonymous and browser:
            return Visitor(id=f"guest:{browser}", name=f"guest {browser[:6]}")
        return None

    def sign_in_message(self) -> str:
        """What someone who is not signed in is told."""
        if self.hf_sign_in:
            return "Sign in with Hugging Face (the button above) to generate videos."
        if on_space():
            return (
                "This studio has no sign-in configured: its operator can add `hf_oauth: true` to the Space's "
                "README front matter, or allow visitors without sign-in (OMNI_STUDIO_ALLOW_ANONYMOUS=true)."
            )
        return "Sign in to generate videos."
