"""Who may do what: the page's accounts, its operators, and whether strangers may generate.

The page tells the studio who is asking (an account's user name, a Hugging Face user on a Space, or only a
browser); this module turns that into a Visitor, or into None where the person must sign in first.

A guest is known by what tells their browser from others (the studio's HttpOnly cookie): a secret, since whoever
sends it acts as that guest. The visitor id, which the history keeps, is therefore a keyed hash of it (HMAC-SHA256),
never the mark itself; the key lives in the outputs folder (`.secrets/guest-key`, its owner's alone, served by no
route), so a restart on the same folder knows each guest again.

A cookie is free to drop, so a guest's limits bind its client address instead: guests of one address are one party
(Visitor.party), which shares the videos per hour, the queue and the fair-share turn, while each guest still sees
only its own work. The party names the address by a keyed hash of it too: no raw address is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from studio.backend.visitors import LOCAL_OPERATOR, Visitor
from studio.config import StudioSettings


class AccessError(ValueError):
    """The accounts or operators given do not make sense together."""


GUEST_KEY_FILE = Path(".secrets") / "guest-key"  # under the outputs folder
GUEST_KEY_BYTES = 32
GUEST_ID_HEX = 32  # 128 bits of the HMAC: ids that never collide by chance, short enough to read


def guest_id(key: bytes, browser: str) -> str:
    """The hex digest that names the guest of `browser` (the cookie, or the page session without one)."""
    return hmac.new(key, browser.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:GUEST_ID_HEX]


def guest_party(key: bytes, address: str) -> str:
    """The party whose limits the guests of client `address` share: a keyed hash, never the address itself (and
    never equal to a guest id: the hash is of another message)."""
    digest = hmac.new(key, b"client-address\x00" + address.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return f"address:{digest.hexdigest()[:GUEST_ID_HEX]}"


def _parse_key(text: str, path: Path) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) < 16:
        why = "empty" if not text.strip() else "not a key"
        raise AccessError(
            f"{path}: the guest key is {why}; remove the file and the studio makes a new one (guests then start "
            "with an empty history)"
        )
    return key


def guest_key(outputs_dir: Path) -> bytes:
    """The studio's guest key, in `outputs_dir/.secrets/guest-key`: read, or made on first use (mode 0600 in a
    0700 folder). Two studios starting at once on one folder end up with the same key."""
    path = Path(outputs_dir) / GUEST_KEY_FILE
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = _make_key(path)
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)  # copied in by hand with looser rights
    except AccessError:
        raise
    except OSError as exc:
        raise AccessError(f"{path}: cannot make or read the guest key ({exc.strerror or exc})") from exc
    return _parse_key(text, path)


def _make_key(path: Path) -> str:
    """A new key, written whole under a temporary name and then linked into place: a studio reading it never sees
    half of one, and where another studio linked its own first, that one is read instead."""
    text = secrets.token_bytes(GUEST_KEY_BYTES).hex() + "\n"
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return path.read_text()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return text


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
    # What turns a browser's mark into its guest id; from_settings reads the outputs folder's. The default, a key
    # of this process alone, keeps the mark out of ids even so. Never shown (repr) nor compared.
    guest_key: bytes = field(default_factory=lambda: secrets.token_bytes(GUEST_KEY_BYTES), repr=False, compare=False)
    # New guest identities one client address may start in an hour (GuestArrivals), as the settings had it.
    new_guests_per_address_per_hour: int = 10

    @classmethod
    def from_settings(cls, settings: StudioSettings, environ: Mapping[str, str] = os.environ) -> AccessPolicy:
        accounts = tuple(read_accounts(settings))
        hf = hf_sign_in_configured(environ)
        operators = [name.strip() for name in settings.operators if name.strip()]
        if accounts and settings.allow_anonymous:
            # Gradio's login (auth=) stands in front of the whole page: no one without an account gets past it.
            raise AccessError(
                "--allow-anonymous and --auth cannot be used together: with accounts (--auth / --auth-file) the "
                "page lets no one in without signing in, so guests could never reach it; drop --allow-anonymous "
                "(or OMNI_STUDIO_ALLOW_ANONYMOUS) to keep the studio to its accounts, or drop the accounts to let "
                "everyone in as a guest"
            )
        if accounts:
            names = {user for user, _ in accounts}
            unknown = [name for name in operators if name not in names]
            if unknown:
                raise AccessError(f"--operator {unknown[0]} names no account (--auth / --auth-file)")
            operators = operators or [accounts[0][0]]
        keyed = {"guest_key": guest_key(Path(settings.outputs_dir))} if settings.allow_anonymous else {}
        return cls(
            accounts=accounts,
            operators=frozenset(operators),
            hf_sign_in=hf and not accounts,
            allow_anonymous=settings.allow_anonymous,
            everyone_operator=not accounts and not on_space(environ) and not settings.allow_anonymous,
            new_guests_per_address_per_hour=settings.new_guests_per_address_per_hour,
            **keyed,
        )

    @property
    def signs_in(self) -> bool:
        return bool(self.accounts) or self.hf_sign_in

    def visitor(
        self, user: str | None = None, hf_user: str | None = None, browser: str = "", address: str = ""
    ) -> Visitor | None:
        """The visitor asking: `user` is the account signed in to the page, `hf_user` the Hugging Face user
        signed in on a Space, `browser` what tells one browser from another, `address` the client address (a
        trusted one: client_address.py); guests of one address share their limits. None: they must sign in
        first."""
        if self.accounts:
            # The page's login lets no one in without an account; a missing name is a caller that got past it.
            return Visitor(id=f"user:{user}", name=user, operator=user in self.operators) if user else None
        if self.hf_sign_in and hf_user:
            return Visitor(id=f"hf:{hf_user}", name=hf_user, operator=hf_user in self.operators)
        if self.everyone_operator:
            return LOCAL_OPERATOR
        if self.allow_anonymous and browser:
            # The mark lets whoever holds it act as this guest: the id (kept in the history) holds a hash of it.
            digest = guest_id(self.guest_key, browser)
            party = guest_party(self.guest_key, address or "unknown")
            return Visitor(id=f"guest:{digest}", name=f"guest {digest[:6]}", party=party)
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
