"""The API keys of the studio's programs: a file of `USER:KEY` or `USER:sha256:HEX` lines (`--api-key-file`), read
into the keys' SHA-256 digests alone, and `omni-studio keys add`'s new key.

A key is a secret that stands for its user: the studio keeps only its digest in memory and compares a presented
key's digest with each one by `hmac.compare_digest`, every entry every time, so the time taken tells nothing of
which entry came close. A file that holds keys in the clear is still read (a user may write one by hand); the
command writes digests only, so a file it made gives no key away.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

HASHED = "sha256:"
DIGEST = re.compile(r"^[0-9a-f]{64}$")
MIN_KEY_CHARS = 16  # a key written by hand shorter than this is guessed too soon
KEY_PREFIX = "oms-"  # says what a key is for, where one turns up in a shell history or a config file
KEY_BYTES = 32
USER_NAME = re.compile(r"^[^\s:#][^\s:]*$")  # one word, no colon: the file's separator


class KeyFileError(ValueError):
    """The key file cannot be read, or one of its lines is not a key."""


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _entry(line: str, where: str) -> tuple[str, str]:
    """(user, digest) of one line of the file."""
    user, sep, secret = line.strip().partition(":")
    if not sep or not USER_NAME.match(user):
        raise KeyFileError(f"{where}: a key is USER:KEY or USER:sha256:HEX, the user one word without a colon")
    if secret.startswith(HASHED):
        digest = secret.removeprefix(HASHED).lower()
        if not DIGEST.match(digest):
            raise KeyFileError(f"{where}: after sha256: comes the key's SHA-256 as 64 hex digits")
        return user, digest
    if len(secret) < MIN_KEY_CHARS:
        raise KeyFileError(
            f"{where}: the key of {user!r} is shorter than {MIN_KEY_CHARS} characters: make one with "
            "`omni-studio keys add`"
        )
    return user, digest_of(secret)


@dataclass(frozen=True)
class KeyRing:
    """The keys of a file, as (user, digest) pairs; a user may have several (one per program, or while changing)."""

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str, source: str = "--api-key-file") -> KeyRing:
        entries: list[tuple[str, str]] = []
        first_line: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                user, digest = _entry(line, f"{source} line {number}")
                if digest in first_line:
                    raise KeyFileError(
                        f"{source} line {number}: the key of line {first_line[digest]} is given again; each key "
                        "stands for one user"
                    )
                first_line[digest] = number
                entries.append((user, digest))
        return cls(tuple(entries))

    @classmethod
    def read(cls, path: Path) -> KeyRing:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise KeyFileError(f"--api-key-file {path}: cannot read it ({why})") from exc
        return cls.parse(text, f"--api-key-file {path}")

    def user_of(self, key: str) -> str | None:
        """The user whose key this is, or None. Every entry is compared, whichever matches."""
        presented = digest_of(key)
        found = None
        for user, digest in self.entries:
            if hmac.compare_digest(presented, digest):
                found = user
        return found

    @property
    def users(self) -> set[str]:
        return {user for user, _ in self.entries}


class KeyFile:
    """The key file as the running studio reads it: read again when it changes (a key added with `keys add`
    works without a restart); a change that does not parse leaves the keys read before in force."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._stamp = self._stat()
        self.ring = KeyRing.read(self.path)  # a file that does not parse stops the studio's start
        self.problem: str | None = None  # why the file's latest change is not in force

    def _stat(self) -> tuple[int, int] | None:
        try:
            status = self.path.stat()
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def current(self) -> KeyRing:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self.ring, self.problem = KeyRing.read(self.path), None
            except KeyFileError as exc:
                self.problem = str(exc)
        return self.ring


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def add_key(path: Path, user: str) -> str:
    """A new key of `user`'s: its digest appended to the file (made, its owner's alone, where it is not there);
    returns the key, which is written nowhere."""
    if not USER_NAME.match(user):
        raise KeyFileError(f"{user!r} is no user name: one word, without a colon")
    path = Path(path)
    if path.exists():
        KeyRing.read(path)  # a file that does not parse is not added to
    key = new_key()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
        if handle.tell() and not path.read_text(encoding="utf-8").endswith("\n"):
            handle.write("\n")
        handle.write(f"{user}:{HASHED}{digest_of(key)}\n")
    return key
