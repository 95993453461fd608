"""Model groups' fields as ml-commons reads them: access mode, backend roles, owner.

Values and checks only; the registry stores them and ``access.policy`` decides with them.
"""

from __future__ import annotations

from typing import Any

from ..access.keys import Caller
from ..access.policy import owner_doc
from ..errors import BadRequest

ACCESS_MODES = ("public", "private", "restricted")
# ml-commons' words for a model or group the caller may not reach (GetModelTransportAction,
# GetModelGroupTransportAction, TransportUpdateModelGroupAction, DeleteModelGroupTransportAction).
NO_MODEL_PRIVILEGE = "User doesn't have privilege to perform this operation on this model"
NO_GROUP_PRIVILEGE = "User doesn't have privilege to perform this operation on this model group"


def group_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("[name] is required and must be a non-empty string")
    return name.strip()


def ownership(caller: Caller | None) -> dict[str, Any]:
    """What a new model group records of its creator: ml-commons' ``owner`` and ``tenant_id``.
    None (an open server): no owner, so the group is public to every later key."""
    if caller is None:
        return {}
    return {"owner": owner_doc(caller), "tenant_id": caller.tenant.name}


def access_fields(body: dict[str, Any], caller: Caller | None = None) -> dict[str, Any]:
    """A model group's ``access`` (and ``backend_roles``) from ml-commons' request fields,
    checked as MLModelGroupManager checks them with access control on (without a mode,
    a group is public here, as one made with access control off: docs/security.md).
    ``add_all_backend_roles`` takes the caller key's backend roles."""
    mode = body.get("access_mode")
    roles = body.get("backend_roles")
    add_all = body.get("add_all_backend_roles")
    if add_all is not None and not isinstance(add_all, bool):
        raise BadRequest("[add_all_backend_roles] must be true or false")
    if roles is not None and (not isinstance(roles, list) or not all(isinstance(r, str) for r in roles)):
        raise BadRequest("[backend_roles] must be a list of strings")
    if add_all:
        if roles:
            raise BadRequest("You cannot specify backend roles and add all backend roles at the same time.")
        if caller is None:
            raise BadRequest("[add_all_backend_roles] needs an API key: no key exists, so no backend roles to add")
        if caller.is_admin:
            raise BadRequest("Admin users cannot add all backend roles to a model group.")
        if not caller.key.backend_roles:
            raise BadRequest("You must have at least one backend role to register a restricted model group.")
        roles = list(caller.key.backend_roles)
        if mode is None:
            mode = "restricted"
    elif roles and caller is not None and not caller.is_admin and not set(roles) <= set(caller.key.backend_roles):
        raise BadRequest("You don't have the backend roles specified.")
    if mode is None:
        mode = "restricted" if roles else "public"
    if not isinstance(mode, str) or mode.lower() not in ACCESS_MODES:
        raise BadRequest(f"[access_mode] must be one of {', '.join(ACCESS_MODES)}")
    mode = mode.lower()
    if roles and mode != "restricted":
        raise BadRequest("You can specify backend roles only for a model group with the restricted access mode.")
    if mode == "restricted" and not roles:
        raise BadRequest("You must specify one or more backend roles or add all backend roles to register a "
                         "restricted model group.")
    return {"access": mode, **({"backend_roles": roles} if roles else {})}
