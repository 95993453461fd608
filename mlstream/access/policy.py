"""Who may reach what: the one predicate every route and every listing asks.

    may_use_model(caller, model_id, name, group)   predict, stream, get, list a model
    may_reach_group(caller, group)                 ml-commons' model-group access control
    may_see_owned(caller, owner)                   stored Responses, usage
    may_see_task(caller, doc)                      batch tasks (and the other tasks: admins only)

A caller is ``None`` while the server has no key (open: everything), else its key and
tenant (``keys.Caller``). An admin reaches everything. Anyone else reaches a model when:

* its tenant's ``models`` and its key's ``models`` both name it (by id or by name; None is
  every model), so a key's list narrows its tenant's and never widens it; and
* the model's group lets it in, as ml-commons' ``ModelAccessControlHelper`` does: a
  group without an owner (registered before keys, or while the server was open) is
  public; ``public`` is everyone; ``private`` the owner; ``restricted`` the owner and
  any key sharing one of the group's backend roles.

Fronts that speak another API answer a model the caller may not use exactly as one that
does not exist, so that names cannot be probed; ml-commons' routes answer its 403s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..usage.records import DEFAULT_TENANT
from .keys import Caller

PUBLIC, PRIVATE, RESTRICTED = "public", "private", "restricted"


@dataclass(frozen=True, slots=True)
class GroupAccess:
    """A model group's access fields, as stored on it."""

    group_id: str
    mode: str = PUBLIC
    owner_key_id: str | None = None
    owner_name: str | None = None
    backend_roles: tuple[str, ...] = ()
    tenant: str = DEFAULT_TENANT

    @property
    def owned(self) -> bool:
        return self.owner_key_id is not None or self.owner_name is not None


def group_access(group_id: str, doc: Mapping[str, Any]) -> GroupAccess:
    """A stored model group's ``GroupAccess`` (its ``owner`` in ml-commons' shape, plus the key id)."""
    owner = doc.get("owner") if isinstance(doc.get("owner"), dict) else {}
    return GroupAccess(group_id, str(doc.get("access") or PUBLIC).lower(), owner.get("key_id"), owner.get("name"),
                       tuple(doc.get("backend_roles") or ()), doc.get("tenant_id") or DEFAULT_TENANT)


def owner_doc(caller: Caller) -> dict[str, Any]:
    """The ``owner`` a caller leaves on a model group it registers (ml-commons' User fields)."""
    key = caller.key
    return {"name": key.name, "backend_roles": list(key.backend_roles), "roles": [key.role],
            "custom_attribute_names": [], "user_requested_tenant": key.tenant, "key_id": key.key_id}


def names_model(allowed: tuple[str, ...] | None, model_id: str, name: str | None) -> bool:
    return allowed is None or model_id in allowed or (name is not None and name in allowed)


def may_use_model(caller: Caller | None, model_id: str, name: str | None, group: GroupAccess | None) -> bool:
    if caller is None or caller.is_admin:
        return True
    if not (names_model(caller.tenant.models, model_id, name) and names_model(caller.key.models, model_id, name)):
        return False
    return group is None or may_reach_group(caller, group)


def is_owner(caller: Caller | None, group: GroupAccess) -> bool:
    if caller is None:
        return False
    if group.owner_key_id is not None:
        return group.owner_key_id == caller.key.key_id
    return group.owner_name is not None and group.owner_name == caller.key.name


def may_reach_group(caller: Caller | None, group: GroupAccess) -> bool:
    if caller is None or caller.is_admin or not group.owned or group.mode == PUBLIC:
        return True
    if is_owner(caller, group):
        return True
    return group.mode == RESTRICTED and bool(set(caller.key.backend_roles) & set(group.backend_roles))


def may_manage_group(caller: Caller | None, group: GroupAccess) -> bool:
    """Update or delete it: an admin, its owner, or a tenant_admin of its tenant."""
    if caller is None or caller.is_admin or is_owner(caller, group):
        return True
    return caller.role == "tenant_admin" and caller.tenant.name == group.tenant


@dataclass(frozen=True, slots=True)
class Owner:
    """Who created a stored thing (a Response, a batch task): None fields for one made while
    the server was open or before tenants, which belongs to the default tenant."""

    key_id: str | None = None
    tenant: str = DEFAULT_TENANT

    def to_doc(self) -> dict[str, Any]:
        return {"owner_key_id": self.key_id, "owner_tenant": self.tenant}


def owner_of(caller: Caller | None) -> Owner:
    return Owner() if caller is None else Owner(caller.key.key_id, caller.tenant.name)


def stored_owner(doc: Mapping[str, Any]) -> Owner:
    return Owner(doc.get("owner_key_id"), doc.get("owner_tenant") or DEFAULT_TENANT)


def may_see_task(caller: Caller | None, doc: Mapping[str, Any]) -> bool:
    """A task: its creator's, as ``may_see_owned``; a task without one (a model's register
    or deploy task, a batch job from before tenants) only an admin's, as the task routes were."""
    if caller is None or caller.is_admin:
        return True
    return doc.get("owner_key_id") is not None and may_see_owned(caller, stored_owner(doc))


def may_see_owned(caller: Caller | None, owner: Owner) -> bool:
    """An admin sees everything, a tenant_admin its tenant's, a user what its key made. What
    has no owner key (made while open, or before tenants) any key of its tenant sees, as before."""
    if caller is None or caller.is_admin:
        return True
    if caller.tenant.name != owner.tenant:
        return False
    return caller.role == "tenant_admin" or owner.key_id is None or owner.key_id == caller.key.key_id
