"""Client API keys and the tenant (owner namespace) each key maps to.

With no keys configured the proxy is open and every caller is the local owner ``""``. With keys
configured, a request must carry ``Authorization: Bearer <key>`` for one of them; the key's tenant
is ``"key-" + sha256(key)[:16]`` — stable across restarts, never the key itself, so neither the
database nor a log line ever holds a client key, and a client key is never sent upstream (the
upstream key comes only from configuration). Sessions, search and memory are all scoped to the
tenant: one key never reads another key's data.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping

from refold._records import dataclass


class PassedKey(str):
    """The caller's own key, as open mode passes it upstream, with the header it came in
    (``authorization``: ``Authorization: Bearer``; ``x-api-key``): an Anthropic upstream takes
    an OAuth token (Claude Code logged in with a subscription sends ``Authorization: Bearer
    sk-ant-oat…``) only as a bearer, and an API key as ``x-api-key``."""

    header: str

    def __new__(cls, value: str, header: str) -> PassedKey:
        key = super().__new__(cls, value)
        key.header = header
        return key


@dataclass(frozen=True)
class Tenant:
    owner: str  # the store's owner namespace ("" = local, no auth)
    # what may go upstream as the bearer when refold holds no upstream key: the client's own
    # bearer in open mode (no client keys: refold is a transparent hop), never a client key
    bearer: str | None


class AuthError(Exception):
    """The request carries no key, or a key that is not configured."""


def owner_for_key(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class KeyRing:
    """The configured client keys; ``authenticate`` turns request headers into a ``Tenant``."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [k.encode() for k in keys if k]

    @property
    def open(self) -> bool:
        return not self._keys

    def authenticate(self, headers: Mapping[str, str]) -> Tenant:
        # Anthropic clients send their key as x-api-key (Claude Code with ANTHROPIC_API_KEY)
        bearer = _bearer(headers.get("authorization", ""))
        header = "authorization"
        if bearer is None:
            bearer = (headers.get("x-api-key") or "").strip() or None
            header = "x-api-key"
        if self.open:
            return Tenant(owner="", bearer=PassedKey(bearer, header) if bearer else None)
        if bearer is None:
            raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
        given = bearer.encode()
        # compare against every key so the timing says nothing about which one nearly matched
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(key, given)
        if not matched:
            raise AuthError("invalid API key")
        return Tenant(owner=owner_for_key(bearer), bearer=None)  # a client key stays here


def _bearer(value: str) -> str | None:
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
