"""API keys and roles.

Keys are random 256-bit tokens, shown once at creation and stored only as their
SHA-256 (a slow password hash buys nothing for a key with that much entropy, and
would cost every request). A request presents its key as ``Authorization: Bearer
<key>`` or as the password of HTTP Basic auth (``curl -u name:KEY``).

Roles: ``admin`` may do everything; ``tenant_admin`` manages the keys, usage and model
groups of its own tenant (``tenants``); ``user`` may predict, stream, and read models.
What a key may reach beyond its role (its tenant's models, model-group access, what it
owns) is ``policy``'s to decide; the authenticator answers who the caller is.
Keys created or revoked by ``mlstream keys`` in another process take effect at the
server's next request: the store's change counter tells it to reload.

What the server does while no key exists (it only ever moves from open to closed):

* **Open** — every route answers anyone — only while the server has never had a key
  and may be open: it is on a loopback address (the demo, a first try of the README),
  or ``--insecure-no-auth`` asked for it. ``mlstream serve`` refuses to start without
  keys on any other address.
* **Closed** — once the server has had a key, or when it was told to refuse
  (``refuse_without_keys``: ``mlstream serve`` on a non-loopback address). Revoking
  the last key then locks every authenticated route (401 saying no key exists and how
  to create one) instead of silently opening them; ``/healthz`` and ``/readyz`` stay
  open as always. A warning is logged once when the last key goes, an info line when
  keys are back. Restart the server to open it again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..caching import CACHE_CONTROLS
from ..errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized
from ..store.sqlite import Record, Store
from ..usage.records import DEFAULT_TENANT, NO_KEY, KeyLimits, parse_key_limits
from .tenants import DEFAULT, Tenant, parse_models, tenant_of

log = logging.getLogger(__name__)

ROLES = ("admin", "tenant_admin", "user")
# What each role may call: a route's role names the least it needs.
_RANK = {"user": 0, "tenant_admin": 1, "admin": 2}
KEY_PREFIX = "mls_"
# The 401's challenge. Basic is offered so that clients which send credentials only once
# challenged (Python's HTTPBasicAuthHandler, Apache HttpClient under the OpenSearch Java
# client) go on working; but a browser answers a Basic challenge to a script's request
# with its own password dialog. A script that says so (SCRIPT_HEADER, as the console and
# most browser libraries send it) is challenged with Bearer alone, which no browser prompts for.
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="mlstream", Bearer realm="mlstream"'}
_SCRIPT_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mlstream"'}
SCRIPT_HEADER = ("X-Requested-With", "XMLHttpRequest")
_CREATE_HINT = "create one with 'mlstream keys create --role admin' (with the server's --data-dir)"


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    name: str
    role: str
    created_time: int
    # Budget, tpm and rpm (``budgets`` enforces them); none by default.
    limits: KeyLimits = field(default=KeyLimits())
    tenant: str = DEFAULT_TENANT
    # ml-commons' backend roles of the caller (model groups in restricted access mode).
    backend_roles: tuple[str, ...] = ()
    # The models it may call, within its tenant's (None: all of the tenant's).
    models: tuple[str, ...] | None = None
    # The response cache's controls its requests may use (caching.CACHE_CONTROLS; None: all).
    allowed_cache_controls: tuple[str, ...] | None = None

    def to_body(self) -> dict[str, Any]:
        """The key as the key routes show it: never its secret (only the hash is stored)."""
        return {"key_id": self.key_id, "name": self.name, "role": self.role, "tenant": self.tenant,
                "backend_roles": list(self.backend_roles),
                "models": None if self.models is None else list(self.models),
                "allowed_cache_controls": _listed(self.allowed_cache_controls),
                "created_time": self.created_time, **self.limits.to_doc()}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: its key and that key's tenant (as loaded with the key)."""

    key: ApiKey
    tenant: Tenant

    @property
    def role(self) -> str:
        return self.key.role

    @property
    def is_admin(self) -> bool:
        return self.key.role == "admin"


_KEY_FIELDS = frozenset({"name", "role", "budget", "budget_period", "tpm", "rpm", "tenant", "backend_roles",
                         "models", "allowed_cache_controls"})


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class KeyStore:
    """Create, list and revoke keys (the ``mlstream keys`` commands)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def create(self, role: str, name: str | None = None, limits: KeyLimits = KeyLimits(), *,
               tenant: str = DEFAULT_TENANT, backend_roles: tuple[str, ...] = (),
               models: tuple[str, ...] | None = None,
               allowed_cache_controls: tuple[str, ...] | None = None) -> tuple[ApiKey, str]:
        """A new key; its name must be free (the key routes find keys by name), its tenant must exist."""
        if role not in ROLES:
            raise BadRequest(f"role must be one of {', '.join(ROLES)}")
        key_id = secrets.token_hex(4)
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(key_id, _checked_name(name) if name is not None else f"key-{key_id}", role,
                     int(time.time() * 1000), limits, tenant, backend_roles, models, allowed_cache_controls)
        with self._store.transaction():
            self._check_tenant(tenant)
            if self._named(key.name):
                raise Conflict(f"a key named [{key.name}] already exists")
            self._store.put("apikey", Record(key_id, _doc(key), hash_key(secret)))
        return key, secret

    def create_from_body(self, body: Any) -> tuple[ApiKey, str]:
        """``POST /_plugins/_mlstream/keys``: {name, role (default user), tenant (default: default),
        backend_roles, models, budget, budget_period, tpm, rpm}."""
        _check_fields(body)
        return self.create(body.get("role", "user"), body.get("name"), parse_key_limits(body),
                           tenant=_tenant_name(body.get("tenant", DEFAULT_TENANT)),
                           backend_roles=_backend_roles(body.get("backend_roles")),
                           models=parse_models(body.get("models")),
                           allowed_cache_controls=_cache_controls(body.get("allowed_cache_controls")))

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key, or those of ``tenant``."""
        keys = [_key(record) for record in self._store.scan("apikey")]
        return keys if tenant is None else [k for k in keys if k.tenant == tenant]

    def get(self, name: str) -> ApiKey:
        """The key named ``name`` (or with that id: keys made before names were unique)."""
        return _key(self._record(name))

    def update(self, name: str, changes: Any) -> ApiKey:
        """Change only the fields ``changes`` names (role, name, limits; null removes a limit)."""
        _check_fields(changes)
        if not changes:
            raise BadRequest("the update must name at least one of " + ", ".join(sorted(_KEY_FIELDS)))
        with self._store.transaction():
            record = self._record(name)
            current = _key(record)
            role = changes.get("role", current.role)
            if role not in ROLES:
                raise BadRequest(f"role must be one of {', '.join(ROLES)}")
            new_name = _checked_name(changes["name"]) if "name" in changes else current.name
            if new_name != current.name and self._named(new_name):
                raise Conflict(f"a key named [{new_name}] already exists")
            tenant = _tenant_name(changes["tenant"]) if "tenant" in changes else current.tenant
            if tenant != current.tenant:
                self._check_tenant(tenant)
            key = ApiKey(current.key_id, new_name, role, current.created_time,
                         parse_key_limits(changes, current.limits), tenant,
                         _backend_roles(changes["backend_roles"]) if "backend_roles" in changes
                         else current.backend_roles,
                         parse_models(changes["models"]) if "models" in changes else current.models,
                         _cache_controls(changes["allowed_cache_controls"]) if "allowed_cache_controls" in changes
                         else current.allowed_cache_controls)
            self._store.put("apikey", Record(record.id, _doc(key), record.secret))
        return key

    def delete(self, name: str) -> ApiKey:
        """Revoke the key named ``name``: refused from the next request on, in every process."""
        with self._store.transaction():
            record = self._record(name)
            self._store.delete("apikey", record.id)
        return _key(record)

    def revoke(self, key_id: str) -> bool:
        return self._store.delete("apikey", key_id)

    def _check_tenant(self, tenant: str) -> None:
        if tenant != DEFAULT_TENANT and self._store.get("tenant", tenant) is None:
            raise BadRequest(f"no tenant named [{tenant}]: create it first (POST /_plugins/_mlstream/tenants)")

    def _named(self, name: str) -> list[Record]:
        return [r for r in self._store.scan("apikey") if r.doc.get("name") == name]

    def _record(self, name: str) -> Record:
        named = self._named(name)
        if len(named) > 1:
            raise Conflict(f"{len(named)} keys are named [{name}]: name one by its id "
                           f"({', '.join(r.id for r in named)})")
        record = named[0] if named else self._store.get("apikey", name)
        if record is None:
            raise NotFound(f"no API key named [{name}]")
        return record


class Authenticator:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()  # guards the fields below; nothing blocking (store, log) runs under it
        self._by_hash: dict[str, Caller] = {}
        self._seen_counter: int | None = None
        self._had_keys = False        # a key existed at some point of this run
        self._refuse_empty = False    # refuse_without_keys() was called

    def refuse_without_keys(self) -> None:
        """Never be open for want of keys (a server on a non-loopback address)."""
        with self._lock:
            self._refuse_empty = True

    @property
    def keys_exist(self) -> bool:
        return bool(self._keys()[0])

    def authenticate(self, authorization: str | None, required_role: str, *,
                     api_key: str | None = None, from_script: bool = False) -> Caller | None:
        """The caller (its key and tenant), checked for ``required_role``; None while the server is open.

        ``api_key``: an ``x-api-key`` header (Anthropic's clients send the key there), used
        when there is no ``Authorization``.

        Unauthorized (401) for a missing or unknown key — the same answer either way,
        so it tells nothing about which keys exist; Forbidden (403) for a known key
        whose role is not enough. With no key at all on a server that must not be open
        (see the module docstring), a 401 that says so. ``from_script``: the request
        carried ``SCRIPT_HEADER``, so the 401 offers no Basic challenge (see ``_CHALLENGE``).
        """
        challenge = _SCRIPT_CHALLENGE if from_script else _CHALLENGE
        keys, closed = self._keys()
        if not keys:
            if not closed:
                return None
            raise Unauthorized(f"no API key exists, so this server refuses every request: {_CREATE_HINT}",
                               headers=challenge)
        secret = _presented_secret(authorization) if authorization else (api_key or "").strip() or None
        if secret is None:
            raise Unauthorized("missing authentication credentials: send an API key as "
                               "'Authorization: Bearer <key>', as 'x-api-key' or as the Basic auth password",
                               headers=challenge)
        # A dict lookup by the SHA-256 of a 256-bit secret: its timing reveals nothing usable.
        caller = keys.get(hash_key(secret))
        if caller is None:
            raise Unauthorized("the API key is not valid", headers=challenge)
        key = caller.key
        if _RANK.get(key.role, 0) < _RANK.get(required_role, 0):
            needs = "admin" if required_role == "admin" else "admin or tenant_admin"
            raise Forbidden(f"API key [{key.key_id}] with role [{key.role}] may not do this; "
                            f"it needs role [{needs}]")
        return caller

    def _keys(self) -> tuple[dict[str, Caller], bool]:
        """(keys by hash, whether an empty key set means closed), reloaded if the store changed.

        The store is read outside the lock; the lock only swaps the result in. Two
        requests may reload at once: the store's change counter only grows, and a scan
        taken after reading counter N is at least as new as N, so the swap keeps the
        result of the higher counter and drops a stale one.
        """
        counter = self._store.change_counter()
        with self._lock:
            if counter == self._seen_counter:
                return self._by_hash, self._had_keys or self._refuse_empty
        tenants = {record.id: record for record in self._store.scan("tenant")}
        by_hash = {}
        for record in self._store.scan("apikey"):
            key = _key(record)
            tenant = _loaded_tenant(key.tenant, tenants)
            if record.secret and tenant is not None:  # a key of a deleted tenant is no key
                by_hash[record.secret] = Caller(key, tenant)
        with self._lock:
            previous, had_keys = self._seen_counter, self._had_keys
            self._had_keys = had_keys or bool(by_hash)  # even from a scan dropped as stale
            if previous is not None and counter < previous:
                return self._by_hash, self._had_keys or self._refuse_empty  # a newer reload won
            lost_all = bool(self._by_hash) and not by_hash
            appeared = previous is not None and not self._by_hash and bool(by_hash)
            self._by_hash, self._seen_counter = by_hash, counter
            closed = self._had_keys or self._refuse_empty
        # Logged outside the lock (a log handler may block on its stream). One reload
        # makes each transition, so each is logged once.
        if lost_all:
            log.warning("the last API key was revoked: every authenticated route now answers 401 "
                        "until a key exists again; %s", _CREATE_HINT)
        elif appeared:
            log.info("API keys exist %s (%d): authenticated routes require one",
                     "again" if had_keys else "now", len(by_hash))
        return by_hash, closed


def from_script(requested_with: str | None) -> bool:
    """Whether a request's ``X-Requested-With`` marks it as a script's (see ``_CHALLENGE``)."""
    return requested_with is not None and requested_with.strip().lower() == SCRIPT_HEADER[1].lower()


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
    doc = record.doc
    models = doc.get("models")
    return ApiKey(record.id, doc.get("name", ""), doc.get("role", "user"), doc.get("created_time", 0),
                  KeyLimits.from_doc(doc), doc.get("tenant", DEFAULT_TENANT), tuple(doc.get("backend_roles") or ()),
                  None if models is None else tuple(models),
                  None if doc.get("allowed_cache_controls") is None else tuple(doc["allowed_cache_controls"]))


def _listed(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


def _cache_controls(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v in CACHE_CONTROLS for v in value):
        raise BadRequest(f"[allowed_cache_controls] must be a list of {', '.join(CACHE_CONTROLS)}")
    return tuple(dict.fromkeys(value))


def _loaded_tenant(name: str, records: Mapping[str, Record]) -> Tenant | None:
    record = records.get(name)
    if record is not None:
        return tenant_of(record)
    return DEFAULT if name == DEFAULT_TENANT else None


def _doc(key: ApiKey) -> dict[str, Any]:
    return {"name": key.name, "role": key.role, "created_time": key.created_time, "tenant": key.tenant,
            "backend_roles": list(key.backend_roles), "models": _listed(key.models),
            "allowed_cache_controls": _listed(key.allowed_cache_controls),
            **key.limits.to_doc()}


def _tenant_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("[tenant] must be a tenant's name")
    return value.strip()


def _backend_roles(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(r, str) and r.strip() for r in value):
        raise BadRequest("[backend_roles] must be a list of non-empty strings")
    return tuple(dict.fromkeys(r.strip() for r in value))


def _checked_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or name.strip() == NO_KEY or "," in name:
        raise BadRequest("[name] must be a non-empty string (not \"-\", without commas)")
    return name.strip()


def _check_fields(body: Any) -> None:
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - _KEY_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in the key; it takes "
                         f"{', '.join(sorted(_KEY_FIELDS))}")
