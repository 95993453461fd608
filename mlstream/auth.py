"""API keys and roles.

Keys are random 256-bit tokens, shown once at creation and stored only as their
SHA-256 (a slow password hash buys nothing for a key with that much entropy, and
would cost every request). A request presents its key as ``Authorization: Bearer
<key>`` or as the password of HTTP Basic auth (``curl -u name:KEY``).

Roles: ``admin`` may do everything; ``user`` may predict, stream, and read models.
While no key exists the server is open (bound to loopback only, see the CLI).
Keys created or revoked by ``mlstream keys`` in another process take effect at the
server's next request: the store's change counter tells it to reload.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from .errors import BadRequest, Forbidden, Unauthorized
from .store import Record, Store

ROLES = ("admin", "user")
KEY_PREFIX = "mls_"
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="mlstream", Bearer realm="mlstream"'}


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    name: str
    role: str
    created_time: int


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class KeyStore:
    """Create, list and revoke keys (the ``mlstream keys`` commands)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def create(self, role: str, name: str | None = None) -> tuple[ApiKey, str]:
        if role not in ROLES:
            raise BadRequest(f"role must be one of {', '.join(ROLES)}")
        key_id = secrets.token_hex(4)
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(key_id, name or f"key-{key_id}", role, int(time.time() * 1000))
        self._store.put("apikey", Record(key_id, {
            "name": key.name, "role": role, "created_time": key.created_time}, hash_key(secret)))
        return key, secret

    def list(self) -> list[ApiKey]:
        return [_key(record) for record in self._store.scan("apikey")]

    def revoke(self, key_id: str) -> bool:
        return self._store.delete("apikey", key_id)


class Authenticator:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._by_hash: dict[str, ApiKey] = {}
        self._seen_counter: int | None = None

    @property
    def keys_exist(self) -> bool:
        return bool(self._keys())

    def authenticate(self, authorization: str | None, required_role: str) -> ApiKey | None:
        """The caller's key, checked for ``required_role``; None while no key exists.

        Unauthorized (401) for a missing or unknown key — the same answer either way,
        so it tells nothing about which keys exist; Forbidden (403) for a known key
        whose role is not enough.
        """
        keys = self._keys()
        if not keys:
            return None
        secret = _presented_secret(authorization)
        if secret is None:
            raise Unauthorized("missing authentication credentials: send an API key as "
                               "'Authorization: Bearer <key>' or as the Basic auth password",
                               headers=_CHALLENGE)
        # A dict lookup by the SHA-256 of a 256-bit secret: its timing reveals nothing usable.
        key = keys.get(hash_key(secret))
        if key is None:
            raise Unauthorized("the API key is not valid", headers=_CHALLENGE)
        if required_role == "admin" and key.role != "admin":
            raise Forbidden(f"API key [{key.key_id}] with role [{key.role}] may not do this; "
                            "it needs role [admin]")
        return key

    def _keys(self) -> dict[str, ApiKey]:
        counter = self._store.change_counter()
        with self._lock:
            if counter != self._seen_counter:
                self._by_hash = {record.secret: _key(record) for record in self._store.scan("apikey")
                                 if record.secret}
                self._seen_counter = counter
            return self._by_hash


def _presented_secret(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return value
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
        _, sep, password = decoded.partition(":")
        return password if sep and password else None
    return None


def _key(record: Record) -> ApiKey:
    return ApiKey(record.id, record.doc.get("name", ""), record.doc.get("role", "user"),
                  record.doc.get("created_time", 0))
