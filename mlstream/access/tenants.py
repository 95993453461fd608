"""Tenants: the teams one deployment serves, each with its models and its limits.

A tenant is ``{name, models, budget, budget_period, tpm, rpm}``. ``models`` lists the
models its keys may call, by id, name or router name: absent (None) is every model,
``[]`` none. Every key belongs to one tenant (``ApiKey.tenant``); a key made before
tenants existed, or without naming one, is in ``default``, which always exists, allows
every model and has no limits until an admin changes it (``PUT .../tenants/default``).

Deleting a tenant revokes its keys in the same transaction: the store's change counter
moves, so every worker and every host on the database refuses them at its next request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import BadRequest, Conflict, NotFound
from ..store.sqlite import Record, Store
from ..usage.records import DEFAULT_TENANT, KeyLimits, parse_key_limits

_FIELDS = frozenset({"name", "models", "budget", "budget_period", "tpm", "rpm"})
MAX_NAME = 64


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    # The models its keys may call (ids or names); None: every model.
    models: tuple[str, ...] | None = None
    limits: KeyLimits = field(default=KeyLimits())
    created_time: int = 0

    def to_body(self) -> dict[str, Any]:
        return {"name": self.name, "models": None if self.models is None else list(self.models),
                "created_time": self.created_time, **self.limits.to_doc()}


DEFAULT = Tenant(DEFAULT_TENANT)


def parse_models(value: Any, field_name: str = "models") -> tuple[str, ...] | None:
    """A ``models`` field: null or absent is every model, a list of ids or names narrows."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) and m.strip() for m in value):
        raise BadRequest(f"[{field_name}] must be a list of model ids or names (or null for every model)")
    return tuple(dict.fromkeys(m.strip() for m in value))


class TenantStore:
    """Create, read, change and delete tenants (the tenant routes and ``mlstream tenants``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def create(self, body: Any) -> Tenant:
        _check_fields(body)
        name = checked_name(body.get("name"))
        tenant = Tenant(name, parse_models(body.get("models")), parse_key_limits(body), int(time.time() * 1000))
        with self._store.transaction():
            if name == DEFAULT_TENANT or self._store.get("tenant", name) is not None:
                raise Conflict(f"a tenant named [{name}] already exists")
            self._store.put("tenant", Record(name, _doc(tenant)))
        return tenant

    def list(self) -> list[Tenant]:
        stored = [tenant_of(record) for record in self._store.scan("tenant")]
        if not any(t.name == DEFAULT_TENANT for t in stored):
            stored.insert(0, DEFAULT)
        return stored

    def get(self, name: str) -> Tenant:
        record = self._store.get("tenant", name)
        if record is not None:
            return tenant_of(record)
        if name == DEFAULT_TENANT:
            return DEFAULT
        raise NotFound(f"no tenant named [{name}]")

    def update(self, name: str, changes: Any) -> Tenant:
        """Change the fields ``changes`` names (null removes a limit; ``models`` null is every model)."""
        _check_fields(changes)
        if "name" in changes and changes["name"] != name:
            raise BadRequest("a tenant's [name] cannot change: create a new tenant and move its keys")
        if not set(changes) - {"name"}:
            raise BadRequest("the update must name at least one of " + ", ".join(sorted(_FIELDS - {"name"})))
        with self._store.transaction():
            current = self.get(name)
            models = parse_models(changes["models"]) if "models" in changes else current.models
            tenant = Tenant(name, models, parse_key_limits(changes, current.limits),
                            current.created_time or int(time.time() * 1000))
            self._store.put("tenant", Record(name, _doc(tenant)))
        return tenant

    def delete(self, name: str) -> tuple[Tenant, int]:
        """Delete the tenant and revoke its keys, in one transaction: (it, keys revoked)."""
        if name == DEFAULT_TENANT:
            raise BadRequest(f"the [{DEFAULT_TENANT}] tenant cannot be deleted")
        with self._store.transaction():
            record = self._store.get("tenant", name)
            if record is None:
                raise NotFound(f"no tenant named [{name}]")
            keys = [k for k in self._store.scan("apikey") if k.doc.get("tenant", DEFAULT_TENANT) == name]
            for key in keys:
                self._store.delete("apikey", key.id)
            self._store.delete("tenant", name)
        return tenant_of(record), len(keys)


def checked_name(name: Any) -> str:
    if (not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME
            or not all(c.isalnum() or c in "-_." for c in name.strip())):
        raise BadRequest(f"[name] must be 1 to {MAX_NAME} letters, digits, '-', '_' or '.'")
    return name.strip()


def tenant_of(record: Record) -> Tenant:
    doc = record.doc
    models = doc.get("models")
    return Tenant(record.id, None if models is None else tuple(models), KeyLimits.from_doc(doc),
                  doc.get("created_time", 0))


def _doc(tenant: Tenant) -> dict[str, Any]:
    return {"models": None if tenant.models is None else list(tenant.models), "created_time": tenant.created_time,
            **tenant.limits.to_doc()}


def _check_fields(body: Any) -> None:
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in the tenant; it takes {', '.join(sorted(_FIELDS))}")
