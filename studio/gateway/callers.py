"""Who calls the gateway: the user of the API key a program sends (`Authorization: Bearer KEY`), as the visitor
that user is on the page, or a refusal in the contract's error envelope.

- A key's user is `Visitor(id="user:NAME")`, the account of the same name where the studio has accounts (on a Space
  with Hugging Face sign-in, the Hugging Face user of that name): one visitor, one History, one quota, whether it
  asks from the page or the API. A user named by `--operator` is an operator.
- Wrong keys count as failed sign-ins do, in the page's own ledger (ui/sign_in_limit.py, handed in at launch): per
  client address, the address locked out (429 with Retry-After) after too many in the ledger's window. A key names
  no account, so only the address's count applies. A missing key is no guess and is not counted.
- Without `--api-key-file`, a studio that has no sign-in and serves this machine alone (loopback, no share link)
  takes every call as its local operator's, as its page does, but for a browser's: a page of another site, or one
  whose name was made to point at this machine, is refused (a browser sends no key by itself). Any other studio
  refuses, saying how to make keys.

A key is never logged, nor kept: only its digest is compared (keys.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from studio.backend.face import LOCAL_OPERATOR, AccessPolicy, Visitor
from studio.gateway.keys import KeyFile

log = logging.getLogger("studio.gateway")

NO_KEYS = (
    "this studio's API takes API keys, and it has none: its operator starts it with --api-key-file FILE and makes "
    "a key with `omni-studio keys add USER --api-key-file FILE`"
)
NO_KEY_SENT = "send your key as the header Authorization: Bearer KEY (openai SDK: api_key=KEY)"
WRONG_KEY = "this key is not one of this studio's"
CHALLENGE = {"WWW-Authenticate": "Bearer"}
NOT_FROM_A_PAGE = (
    "a studio without API keys answers programs on this machine alone (Host 127.0.0.1, localhost or [::1]), never a "
    "page of another site: make keys with `omni-studio keys add USER --api-key-file FILE` to be called otherwise"
)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def loopback_name(host: str) -> bool:
    """Whether a Host header names this machine by a loopback name or address (its port aside)."""
    host = host.strip().lower()
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] if ":" in host else host
    return name in LOOPBACK_NAMES


class FailureRefusal(Protocol):
    retry_after_s: int

    def detail(self) -> str: ...


class FailureLedger(Protocol):
    """What the gateway uses of the page's sign-in ledger (ui/sign_in_limit.py SignInLedger)."""

    def begin(self, account: str | None, address: str) -> object: ...

    def finish(self, ticket: object, failed: bool | None) -> list[str]: ...


@dataclass
class CallerRefused(Exception):
    """A call the gateway answers without going further: 401 (no key, a wrong one), 429 (too many wrong ones)."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


def bearer_key(authorization: str | None) -> str | None:
    scheme, _, key = (authorization or "").strip().partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


class GatewayAccess:
    def __init__(
        self,
        policy: AccessPolicy,
        keys: KeyFile | None,
        ledger: FailureLedger,
        local_operator_without_keys: bool,
    ) -> None:
        """`local_operator_without_keys`: the studio has no sign-in and serves this machine alone (launch.py says)."""
        self.policy = policy
        self.keys = keys
        self.ledger = ledger
        self.local_operator_without_keys = local_operator_without_keys

    def visitor_of(self, user: str) -> Visitor:
        """The visitor a key's user is, as AccessPolicy.visitor names them: the account of that name, or on a Space
        whose visitors sign in with Hugging Face, the Hugging Face user; else an API user of their own."""
        kind = "hf" if self.policy.hf_sign_in else "user"
        return Visitor(id=f"{kind}:{user}", name=user, operator=user in self.policy.operators)

    def caller(
        self, authorization: str | None, address: str, host: str = "127.0.0.1", cross_site: bool = False
    ) -> Visitor:
        """The visitor calling; raises CallerRefused. `host`: the Host the request names; `cross_site`: a browser
        says it comes from a page of another site (ui/same_origin.py)."""
        if self.keys is None:
            if not self.local_operator_without_keys:
                raise CallerRefused(401, NO_KEYS, dict(CHALLENGE))
            # A browser sends no key by itself: without keys, a page of another site (or one whose name was made to
            # point at this machine) could make videos as the operator. Programs send neither.
            if cross_site or not loopback_name(host):
                raise CallerRefused(403, NOT_FROM_A_PAGE)
            return LOCAL_OPERATOR
        key = bearer_key(authorization)
        if key is None:
            raise CallerRefused(401, NO_KEY_SENT, dict(CHALLENGE))
        ticket = self.ledger.begin(None, address)
        if hasattr(ticket, "retry_after_s"):  # locked out: the ledger's refusal
            refusal: FailureRefusal = ticket  # type: ignore[assignment]
            log.info("refused an API call from %s: locked for %d s more", address, refusal.retry_after_s)
            raise CallerRefused(429, refusal.detail(), {"Retry-After": str(refusal.retry_after_s)})
        user = None
        try:
            user = self.keys.current().user_of(key)
        finally:
            for line in self.ledger.finish(ticket, user is None):
                log.warning("%s (API keys)", line)
        if user is None:
            log.warning("a wrong API key from %s", address)
            raise CallerRefused(401, WRONG_KEY, dict(CHALLENGE))
        return self.visitor_of(user)
