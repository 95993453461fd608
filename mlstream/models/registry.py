"""Connectors, model groups, models and tasks: the ml-commons resource API over the store.

Every change runs in one store transaction, so a request that fails leaves the
stored state as it was. The predict path reads models through a small cache that
every change here invalidates.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from functools import partial
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .connectors import DRY_RUN, DRY_RUN_CONNECTOR_ID, Connector, parse_connector
from ..access.credentials import CredentialCodec
from ..access.keys import Caller
from ..access.policy import GroupAccess, group_access, is_owner, may_manage_group, may_reach_group, may_use_model
from .groups import NO_GROUP_PRIVILEGE, NO_MODEL_PRIVILEGE, access_fields, group_name, ownership
from ..settings.endpoints import EndpointPolicy
from ..errors import AccessDenied, BadRequest, Conflict, Forbidden, IndexNotFound, NotFound
from ..guard.guardrails import Guardrails, parse as parse_guardrails
from .interfaces import preset_interface
from . import fields as model_fields
from .fields import (EXTENSION_FIELDS, auto_deploy_allowed, check_embedding_model, check_model_config, checked_fields,
                     config_version, model_pricing, ttl_minutes)
from ..usage.limits import RateLimit, parse_rate_limiter
from .routing import LLM_INTERFACE, Routing, check_families, check_graph, parse_routing
from .search import run_search
from ..store.sqlite import Record, Store
from ..usage.records import Pricing, parse_pricing
from ..caching import CacheConfig, parse_cache

log = logging.getLogger(__name__)

NODE_ID = "mlstream"
UNKNOWN_MODEL = "Failed to find model with the provided model id: {}"
REGISTERED = "REGISTERED"
DEPLOYED = "DEPLOYED"
_MODEL_GROUP_FIELDS = frozenset({"name", "description", "access_mode", "backend_roles", "add_all_backend_roles",
                                 "model_group_id"})
_MODEL_FIELDS = frozenset({
    "name", "function_name", "description", "connector_id", "connector", "model_group_id",
    "rate_limiter", "version", "is_enabled", "guardrails", "interface", "model_format",
    "access_mode", "backend_roles", "add_all_backend_roles", "deploy_setting", "model_config",
})
# MLUpdateModelInput's fields (model_id and tenant_id are the URL's, taken and ignored).
_UPDATE_FIELDS = frozenset({
    "name", "description", "model_group_id", "is_enabled", "rate_limiter", "model_config", "deploy_setting",
    "connector_id", "connector", "guardrails", "interface", "model_id", "tenant_id",
})
# The ml-commons index each kind lives in: named by OpenSearch's answers about it.
_INDEX = {"model": ".plugins-ml-model", "connector": ".plugins-ml-connector",
          "model_group": ".plugins-ml-model-group", "task": ".plugins-ml-task"}
# Meta records holding when a model was last called (by any process), for its TTL.
_ACCESS_PREFIX = "model_access."


def new_id() -> str:
    """A URL-safe random id of ml-commons' length (20 characters)."""
    return secrets.token_urlsafe(15)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """What predict needs: the model and its connector, credentials unsealed."""

    model_id: str
    name: str
    state: str
    connector: Connector
    rate_limit: RateLimit | None
    # The model's interface (interfaces.parse_interface): JSON Schema texts by "input"/"output".
    interface: Mapping[str, str] | None = None
    enabled: bool = True  # is_enabled: false refuses every call ("Model is disabled.")
    ttl_minutes: int = -1  # deploy_setting.model_ttl_minutes: its calls are noted only when >= 0
    pricing: Pricing | None = None  # None: the model's calls have cost null
    guardrails: Guardrails | None = None  # checked by the predictor (``guardrails``)
    group: GroupAccess | None = None  # its model group's access fields (``access.policy``)
    cache: CacheConfig | None = None  # its own response cache setting (None: the server's default)
    config_version: str = ""  # changes with the model or its connector: part of a cache entry's key


@dataclass(frozen=True, slots=True)
class RouterModel:
    """A router model (``routing``): no connector; each call is served by one of its targets."""

    model_id: str
    name: str
    state: str
    routing: Routing
    rate_limit: RateLimit | None = None
    enabled: bool = True
    ttl_minutes: int = -1
    group: GroupAccess | None = None


AnyModel = ResolvedModel | RouterModel


def may_use(caller: Caller | None, model: AnyModel) -> bool:
    """``policy.may_use_model`` for a resolved model."""
    return may_use_model(caller, model.model_id, model.name, model.group)


class Registry:
    def __init__(self, store: Store, codec: CredentialCodec,
                 endpoint_policy: Callable[[], EndpointPolicy],
                 auto_deploy: Callable[[], bool] = lambda: True,
                 clock: Callable[[], int] = lambda: now_ms()) -> None:
        self._store = store
        self._clock = clock  # wall time in ms, for model TTLs (a test moves it)
        self._codec = codec
        self._endpoint_policy = endpoint_policy
        self._auto_deploy = auto_deploy  # asked only when a predict finds its model undeployed
        # Guards the resolved-model cache: dict lookups and updates only. A miss reads
        # the store (its own lock) with this lock released.
        self._cache_lock = threading.Lock()
        self._cache: dict[str, ResolvedModel] = {}
        # Bumped by every invalidation: a miss read before one must not fill the cache
        # after it (an undeployed model would go on serving from a stale entry).
        self._cache_generation = 0
        # The store's change counter when the cache was last known current: another
        # process's (or instance's) write moves it and empties the cache.
        self._seen_counter: int | None = None
        # When each model was last resolved for a call here and not yet written to the store
        # (flush_access): dict updates only, under the cache lock.
        self._accessed: dict[str, int] = {}

    # --- connectors ------------------------------------------------------------

    def create_connector(self, body: Any) -> str:
        connector = self._checked_connector(body)
        if body.get(DRY_RUN) is True:
            return DRY_RUN_CONNECTOR_ID  # checked, as ml-commons' dry run, and not stored
        connector_id = new_id()
        stamp = now_ms()
        self._store.put("connector", Record(
            connector_id, {**connector.public_doc(), "created_time": stamp, "last_updated_time": stamp},
            self._codec.seal(dict(connector.credential))))
        return connector_id

    def get_connector(self, connector_id: str) -> dict[str, Any]:
        return self._connector_record(connector_id).doc

    def connector(self, connector_id: str) -> Connector:
        """A connector by id, its credentials unsealed (an MCP connector's tools are listed)."""
        return self._connector(self._connector_record(connector_id))

    def update_connector(self, connector_id: str, changes: Any) -> None:
        if not isinstance(changes, dict) or not changes:
            raise BadRequest("the update must be a non-empty JSON object")
        with self._store.transaction():
            record = self._connector_record(connector_id)
            current = self._connector(record)
            merged: dict[str, Any] = {**_without_times(record.doc), "credential": dict(current.credential)}
            for key, value in changes.items():
                if key == "parameters" and isinstance(value, dict):
                    merged["parameters"] = {**merged.get("parameters", {}), **value}
                else:
                    merged[key] = value
            connector = self._checked_connector(merged)
            self._store.put("connector", Record(
                connector_id,
                {**connector.public_doc(), "created_time": record.doc.get("created_time"),
                 "last_updated_time": now_ms()},
                self._codec.seal(dict(connector.credential))))
        self._invalidate()

    def delete_connector(self, connector_id: str) -> None:
        """With no connector at all, DeleteConnectorTransportAction's words; for an unknown
        id, as ``delete_model_group`` says, the error body worded as its get's."""
        with self._store.transaction():
            self._connector_record(connector_id)
            users = [m.id for m in self._store.scan("model") if m.doc.get("connector_id") == connector_id]
            if users:
                raise Conflict(f"{len(users)} models are still using this connector, please delete "
                               f"or update the models first: {users}")
            self._store.delete("connector", connector_id)

    # --- models ----------------------------------------------------------------

    def register_model(self, body: Any, *, deploy: bool, caller: Caller | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - _MODEL_FIELDS - set(EXTENSION_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model")
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise BadRequest("[name] is required and must be a non-empty string")
        function_name = body.get("function_name", "remote")
        if not isinstance(function_name, str) or function_name.lower() != "remote":
            raise BadRequest("[function_name] must be \"remote\": only remote models are served")
        fields = checked_fields(body, _MODEL_FIELDS | set(EXTENSION_FIELDS))
        description = fields.get("description")
        if "model_config" in fields:
            check_model_config(fields["model_config"], None)
        group = body.get("model_group_id")
        if group is not None and not isinstance(group, str):
            raise BadRequest("[model_group_id] must be a string")
        has_id, has_inline = body.get("connector_id") is not None, body.get("connector") is not None
        router = "routing" in fields
        if router and (has_id or has_inline):
            raise BadRequest("a router model ([routing]) has no [connector_id] or [connector]: its targets do")
        if not router and has_id == has_inline:
            raise BadRequest("exactly one of [connector_id] or [connector] is required")
        access = access_fields(body, caller) if group is None else None
        stamp = self._clock()
        doc: dict[str, Any] = {
            **fields, "name": name, "algorithm": "REMOTE", "description": description,
            "model_state": DEPLOYED if deploy else REGISTERED,
            "created_time": stamp, "last_updated_time": stamp, "last_registered_time": stamp,
        }
        if deploy:
            doc["last_deployed_time"] = stamp
        secret = None
        with self._store.transaction():
            group_id, version = self._next_version(group, name, description, access, caller)
            doc["model_group_id"], doc["model_version"] = group_id, str(version)
            model_id = new_id()
            if router:
                self._check_routing(model_id, fields["routing"])
            elif has_id:
                connector_id = body["connector_id"]
                if not isinstance(connector_id, str):
                    raise BadRequest("[connector_id] must be a string")
                connector_record = self._record("connector", connector_id, f"Failed to find connector:{connector_id}",
                                                "Failed to find connector")  # MLModelManager.getConnector
                doc["connector_id"] = connector_id
                public = connector_record.doc
            else:
                connector = self._checked_connector(body["connector"])
                doc["connector"] = public = connector.public_doc()
                secret = self._codec.seal(dict(connector.credential))
            if "interface" not in doc and not router:  # TransportRegisterModelAction: the connector's preset
                preset = _preset(public)
                if preset is not None:
                    doc["interface"] = preset
            if "pricing" in doc:  # an embedding model's output price may be left out
                doc["pricing"] = model_pricing(doc, None if router else public)
            check_embedding_model(doc, model_id, partial(self._store.get, "model"))
            self._store.put("model", Record(model_id, doc, secret))
            task_id = self._add_task(model_id, "REGISTER_MODEL")
            if deploy:
                self._add_task(model_id, "DEPLOY_MODEL")
        return {"task_id": task_id, "status": "CREATED", "model_id": model_id}

    def update_model(self, model_id: str, body: Any) -> None:
        """ml-commons' ``PUT /_plugins/_ml/models/<id>`` (RestMLUpdateModelAction,
        UpdateModelTransportAction): the fields given replace the stored ones, all or none.
        The next call uses the change (the resolved-model cache is emptied)."""
        if not isinstance(body, dict) or not body:
            raise BadRequest("Update model request has empty body")
        unknown = sorted(set(body) - _UPDATE_FIELDS - set(EXTENSION_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model update")
        if body.get("connector_id") is not None and body.get("connector") is not None:
            raise BadRequest("Model cannot have both stand-alone connector and internal connector. "
                             "Please check your update input body.")
        fields = checked_fields(body, (_UPDATE_FIELDS | set(EXTENSION_FIELDS)) - {"rate_limiter"})
        with self._store.transaction():
            record = self._model_record(model_id, "Failed to find model to update with the provided model id: "
                                        + model_id, None)
            doc = {**record.doc, **fields}
            secret = record.secret
            if "model_config" in fields:
                check_model_config(fields["model_config"], record.doc.get("model_config"))
            if "routing" in fields:
                if "routing" not in record.doc:
                    raise BadRequest("[routing] is set only on a router model: this model has a connector")
                self._check_routing(model_id, fields["routing"])
            limiter = _merged_rate_limiter(record.doc.get("rate_limiter"), body.get("rate_limiter"))
            if limiter is not None:
                doc["rate_limiter"] = limiter
            connector_id = body.get("connector_id")
            if connector_id is not None and connector_id != "":
                if not isinstance(connector_id, str):
                    raise BadRequest("[connector_id] must be a string")
                if "connector_id" not in record.doc:
                    raise BadRequest("This remote does not have a connector_id field, maybe it uses an internal "
                                     "connector.")
                self._connector_record(connector_id)
                doc["connector_id"] = connector_id
            if body.get("connector") is not None:
                if "connector" not in record.doc:
                    raise BadRequest("Cannot update connector settings for this model. The model was created with a "
                                     "connector_id and does not have an inline connector.")
                connector = self._updated_inline_connector(record, body["connector"])
                doc["connector"] = connector.public_doc()
                secret = self._codec.seal(dict(connector.credential))
            group_id = body.get("model_group_id")
            if isinstance(group_id, str) and group_id and group_id != record.doc.get("model_group_id"):
                group = self._store.get("model_group", group_id)
                if group is None:
                    raise NotFound("Failed to find the model group with the provided model group id in the update "
                                   f"model input, MODEL_GROUP_ID: {group_id}")
                version = int(group.doc.get("latest_version", 0)) + 1
                self._store.put("model_group", Record(group_id, {**group.doc, "latest_version": version,
                                                                 "last_updated_time": self._clock()}))
                doc["model_group_id"], doc["model_version"] = group_id, str(version)
            elif group_id is not None and not isinstance(group_id, str):
                raise BadRequest("[model_group_id] must be a string")
            if "pricing" in fields:  # for the model as updated (its connector, its model_config)
                doc["pricing"] = model_pricing(doc, self._stored_connector(doc))
            check_embedding_model(doc, model_id, partial(self._store.get, "model"))
            doc["last_updated_time"] = self._clock()
            self._store.put("model", Record(model_id, doc, secret))
        self._invalidate()

    def _updated_inline_connector(self, record: Record, changes: Any) -> Connector:
        """``Connector.update``: each field given replaces the stored one whole (parameters
        and credential too), then the endpoint is checked as at create time."""
        if not isinstance(changes, dict):
            raise BadRequest("[connector] must be a JSON object")
        merged: dict[str, Any] = {**_without_times(record.doc["connector"]), "credential": self._unseal(record.secret)}
        merged.update({key: value for key, value in changes.items() if value is not None})
        return self._checked_connector(merged)

    def _next_version(self, group_id: str | None, model_name: str, description: str | None,
                      access: dict[str, Any] | None, caller: Caller | None) -> tuple[str, int]:
        """The model group a new model joins and its version there (inside the caller's
        transaction). As ml-commons: without ``model_group_id`` the model joins the group
        named after it, created on the spot if there is none."""
        if group_id is not None:
            record = self._model_group_record(group_id)
        else:
            record = self._model_group_named(model_name)
            if record is None:
                stamp = now_ms()
                group_doc = {"name": model_name, "latest_version": 0, **(access or {"access": "public"}),
                             **ownership(caller), "created_time": stamp, "last_updated_time": stamp}
                if description is not None:
                    group_doc["description"] = description
                record = Record(new_id(), group_doc)
        version = int(record.doc.get("latest_version", 0)) + 1
        self._store.put("model_group", Record(record.id, {**record.doc, "latest_version": version,
                                                          "last_updated_time": now_ms()}))
        return record.id, version

    # --- model groups ------------------------------------------------------------

    def register_model_group(self, body: Any, caller: Caller | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - _MODEL_GROUP_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model group")
        name = group_name(body.get("name"))
        description = body.get("description")
        if description is not None and not isinstance(description, str):
            raise BadRequest("[description] must be a string")
        wanted_id = body.get("model_group_id")
        if wanted_id is not None and (not isinstance(wanted_id, str) or not wanted_id.strip()):
            raise BadRequest("[model_group_id] must be a non-empty string")
        stamp = now_ms()
        doc: dict[str, Any] = {"name": name, "latest_version": 0, **access_fields(body, caller),
                               **ownership(caller), "created_time": stamp, "last_updated_time": stamp}
        if description is not None:
            doc["description"] = description
        with self._store.transaction():
            self._check_group_name_free(name)
            group_id = wanted_id or new_id()
            if self._store.get("model_group", group_id) is not None:
                raise Conflict(f"A model group with the id [{group_id}] already exists")
            self._store.put("model_group", Record(group_id, doc))
        return {"model_group_id": group_id, "status": "CREATED"}

    def get_model_group(self, group_id: str, caller: Caller | None = None) -> dict[str, Any]:
        record = self._model_group_record(group_id, empty="Failed to find model group index")
        if not may_reach_group(caller, group_access(record.id, record.doc)):
            raise Forbidden(NO_GROUP_PRIVILEGE)
        return record.doc

    def update_model_group(self, group_id: str, changes: Any, caller: Caller | None = None) -> dict[str, Any]:
        if not isinstance(changes, dict) or not changes:
            raise BadRequest("the update must be a non-empty JSON object")
        unknown = sorted(set(changes) - (_MODEL_GROUP_FIELDS - {"model_group_id"}))
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model group update")
        with self._store.transaction():
            record = self._model_group_record(group_id, empty="Failed to find model group")
            access = group_access(record.id, record.doc)
            if not may_manage_group(caller, access):
                raise Forbidden("You don't have permission to update this model group.")
            access_change = any(key in changes for key in ("access_mode", "backend_roles", "add_all_backend_roles"))
            if access_change and caller is not None and not caller.is_admin and not is_owner(caller, access):
                raise Forbidden("Only owner or admin can update access control data.")
            doc = dict(record.doc)
            if changes.get("name") is not None:
                name = group_name(changes["name"])
                if name != doc.get("name"):
                    self._check_group_name_free(name)
                    doc["name"] = name
            description = changes.get("description")
            if description is not None:
                if not isinstance(description, str):
                    raise BadRequest("[description] must be a string")
                if description.strip():
                    doc["description"] = description
            if access_change:
                current = {"access_mode": doc.get("access", "public"), "backend_roles": doc.get("backend_roles")}
                if (str(changes.get("access_mode", "restricted")).lower() != "restricted"
                        or changes.get("add_all_backend_roles") is True or "backend_roles" in changes):
                    current["backend_roles"] = None  # as ml-commons: leaving restricted drops the roles
                doc = {k: v for k, v in doc.items() if k not in ("access", "backend_roles")}
                doc.update(access_fields({**current, **changes}, caller))
            doc["last_updated_time"] = now_ms()
            self._store.put("model_group", Record(group_id, doc))
        return {"status": "Updated"}

    def delete_model_group(self, group_id: str, caller: Caller | None = None) -> None:
        """With no group at all, DeleteModelGroupTransportAction's words. For an unknown id
        ml-commons passes on OpenSearch's delete answer (``"result": "not_found"``, status
        404), which is no error body: the contract wants one, worded as its get's."""
        with self._store.transaction():
            record = self._model_group_record(group_id, empty="Failed to find model group")
            if not may_manage_group(caller, group_access(record.id, record.doc)):
                raise Forbidden("User doesn't have privilege to delete this model group")
            if any(m.doc.get("model_group_id") == group_id for m in self._store.scan("model")):
                raise Conflict("Cannot delete the model group when it has associated model versions")
            self._store.delete("model_group", group_id)

    def _model_group_record(self, group_id: str, empty: str | None = None) -> Record:
        # GetModelGroupTransportAction / TransportUpdateModelGroupAction
        return self._record("model_group", group_id,
                            f"Failed to find model group with the provided model group id: {group_id}", empty)

    def _model_group_named(self, name: str) -> Record | None:
        return next((g for g in self._store.scan("model_group") if g.doc.get("name") == name), None)

    def _check_group_name_free(self, name: str) -> None:
        taken = self._model_group_named(name)
        if taken is not None:
            raise BadRequest(f"The name you provided is already being used by a model group with ID: {taken.id}.")

    def get_model(self, model_id: str, caller: Caller | None = None) -> dict[str, Any]:
        # GetModelTransportAction
        record = self._model_record(model_id, f"Failed to find model with the provided model id: {model_id}",
                                    "Fail to find model")
        if not self._may_use_doc(caller, record.id, record.doc, self._groups()):
            raise Forbidden(NO_MODEL_PRIVILEGE)
        return record.doc

    def _groups(self) -> dict[str, GroupAccess]:
        """Every model group's access fields, by id (for listings: one scan)."""
        return {g.id: group_access(g.id, g.doc) for g in self._store.scan("model_group")}

    @staticmethod
    def _may_use_doc(caller: Caller | None, model_id: str, doc: Mapping[str, Any],
                     groups: Mapping[str, GroupAccess]) -> bool:
        return may_use_model(caller, model_id, doc.get("name"), groups.get(doc.get("model_group_id", "")))

    def usable_models(self, caller: Caller | None, docs: list[tuple[str, dict[str, Any]]]
                      ) -> list[tuple[str, dict[str, Any]]]:
        """The (id, doc) pairs of ``docs`` the caller may use: what every listing shows."""
        if caller is None or caller.is_admin:
            return docs
        groups = self._groups()
        return [(model_id, doc) for model_id, doc in docs if self._may_use_doc(caller, model_id, doc, groups)]

    def deploy_model(self, model_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._set_state(self._model_record(model_id), DEPLOYED)
            task_id = self._add_task(model_id, "DEPLOY_MODEL")
        return {"task_id": task_id, "task_type": "DEPLOY_MODEL", "status": "COMPLETED"}

    def undeploy_model(self, model_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._set_state(self._model_record(model_id, UNKNOWN_MODEL.format(model_id), None), REGISTERED)
        return {NODE_ID: {"stats": {model_id: "undeployed"}}}

    def undeploy_models(self, model_ids: list[str] | None) -> dict[str, Any]:
        """Undeploy these models (all deployed ones when None), all or none: an unknown id
        is a 404 and undeploys nothing. As ml-commons: only the models that were deployed
        are listed, and nothing at all (``{}``) when none was."""
        undeployed: dict[str, str] = {}
        with self._store.transaction():
            if model_ids is None:
                records = [m for m in self._store.scan("model") if m.doc.get("model_state") == DEPLOYED]
            else:
                records = [self._model_record(model_id, UNKNOWN_MODEL.format(model_id), None)
                           for model_id in dict.fromkeys(model_ids)]
            for record in records:
                if record.doc.get("model_state") == DEPLOYED:
                    self._set_state(record, REGISTERED)
                    undeployed[record.id] = "undeployed"
        return {NODE_ID: {"stats": undeployed}} if undeployed else {}

    def counts(self) -> dict[str, int]:
        """How many connectors and models are stored, and how many models are deployed."""
        models = self._store.scan("model")
        return {"connectors": len(self._store.scan("connector")), "models": len(models),
                "deployed": sum(1 for m in models if m.doc.get("model_state") == DEPLOYED)}

    def deployed_models(self) -> list[tuple[str, dict[str, Any]]]:
        return [(m.id, m.doc) for m in self._store.scan("model") if m.doc.get("model_state") == DEPLOYED]

    def delete_model(self, model_id: str) -> None:
        with self._store.transaction():
            record = self._model_record(model_id, empty="Failed to find model")  # DeleteModelTransportAction
            if record.doc.get("model_state") == DEPLOYED:
                raise Conflict("Model cannot be deleted in deploying or deployed state. "
                               "Try undeploy model first then delete")
            self._store.delete("model", model_id)
            self._store.delete("controller", model_id)  # as ml-commons: its controller goes with it
        self._invalidate()

    def resolve(self, model_id: str, caller: Caller | None = None) -> AnyModel:
        """The model for a predict call, deploying it on first use (ml-commons' auto-deploy).
        The call counts as the model's use for its TTL (``deploy_setting.model_ttl_minutes``).
        AccessDenied when ``caller`` may not use it, checked before anything is deployed."""
        counter = self._store.change_counter()
        with self._cache_lock:
            if counter != self._seen_counter:
                self._cache.clear()
                self._cache_generation += 1
                self._seen_counter = counter
            cached = self._cache.get(model_id)
            generation = self._cache_generation
            if cached is not None and cached.ttl_minutes >= 0:
                self._accessed[model_id] = self._clock()
        if cached is not None:
            if not may_use(caller, cached):
                raise AccessDenied(NO_MODEL_PRIVILEGE)
            return _enabled(cached)
        with self._store.transaction():
            record = self._model_record(model_id)
            group_record = self._store.get("model_group", record.doc.get("model_group_id") or "")
            group = None if group_record is None else group_access(group_record.id, group_record.doc)
            if not may_use_model(caller, model_id, record.doc.get("name"), group):
                raise AccessDenied(NO_MODEL_PRIVILEGE)
            if record.doc.get("model_state") != DEPLOYED:
                if not self._auto_deploy():
                    raise BadRequest(f"Model not ready yet. Please deploy the model first: {model_id} "
                                     "(plugins.ml_commons.model_auto_deploy.enable is false)")
                if not auto_deploy_allowed(record.doc):
                    raise BadRequest("Auto deployment disabled for this model, please deploy model first "
                                     f"Model ID: {model_id}")
                record = self._set_state(record, DEPLOYED)
            connector = self._model_connector(record) if "routing" not in record.doc else None
        limiter = record.doc.get("rate_limiter")
        limit = parse_rate_limiter(limiter) if limiter else None
        enabled = record.doc.get("is_enabled") is not False
        resolved: AnyModel
        if connector is None:
            resolved = RouterModel(model_id, record.doc["name"], DEPLOYED, parse_routing(record.doc["routing"]),
                                   limit, enabled, ttl_minutes(record.doc), group)
        else:
            resolved = ResolvedModel(model_id, record.doc["name"], DEPLOYED, connector, limit,
                                     record.doc.get("interface"), enabled, ttl_minutes(record.doc),
                                     pricing=parse_pricing(record.doc.get("pricing")),
                                     guardrails=parse_guardrails(record.doc.get("guardrails")), group=group,
                                     cache=parse_cache(record.doc["cache"]) if record.doc.get("cache") else None,
                                     config_version=config_version(record.doc, self._stored_connector(record.doc)))
        with self._cache_lock:
            if generation == self._cache_generation:
                self._cache[model_id] = resolved
            if resolved.ttl_minutes >= 0:  # only a model with a TTL needs its calls written down
                self._accessed[model_id] = self._clock()
        return _enabled(resolved)

    # --- model TTLs --------------------------------------------------------------

    def flush_access(self) -> None:
        """Write when this process last called each model with a TTL since the previous flush,
        so every process (``--workers``, instances on one database) sees the latest call."""
        with self._cache_lock:
            accessed, self._accessed = self._accessed, {}
        if not accessed:
            return
        with self._store.transaction():
            for model_id, stamp in accessed.items():
                known = self._store.get("meta", _ACCESS_PREFIX + model_id)
                if known is None or int(known.doc.get("time", 0)) < stamp:
                    self._store.put("meta", Record(_ACCESS_PREFIX + model_id, {"time": stamp}))

    def undeploy_idle_models(self) -> list[str]:
        """Undeploy each deployed model with a TTL that has not been called for that long
        (since its last call, or its deployment if later): ``MLModelCacheHelper.getExpiredModels``
        then MLSyncUpCron's undeploy. Returns their ids."""
        self.flush_access()
        now = self._clock()
        expired: list[str] = []
        with self._store.transaction():
            for record in self._store.scan("model"):
                ttl = ttl_minutes(record.doc)
                if ttl < 0 or record.doc.get("model_state") != DEPLOYED:
                    continue
                access = self._store.get("meta", _ACCESS_PREFIX + record.id)
                last = max(int(record.doc.get("last_deployed_time") or 0),
                           int(access.doc.get("time", 0)) if access is not None else 0)
                if now - last >= ttl * 60_000:
                    self._set_state(record, REGISTERED)
                    expired.append(record.id)
        for model_id in expired:
            log.info("undeployed model %s: not called for its model_ttl_minutes", model_id)
        return expired

    # --- tasks -----------------------------------------------------------------

    def get_task(self, task_id: str) -> dict[str, Any]:
        # GetTaskTransportAction / DeleteTaskTransportAction: the same words either way
        return self._record("task", task_id, "Failed to find task").doc

    def delete_task(self, task_id: str) -> None:
        # Only a batch prediction's task outlives its request; as ml-commons, a running
        # one stays (DeleteTaskTransportAction).
        with self._store.transaction():
            if self.get_task(task_id).get("state") == "RUNNING":
                raise Conflict("Task cannot be deleted in running state. Try after some time.")
            self._store.delete("task", task_id)

    def create_task(self, doc: dict[str, Any]) -> str:
        """Store a task that outlives its request (a batch prediction's); its id."""
        task_id = new_id()
        self._store.put("task", Record(task_id, doc))
        return task_id

    def update_task(self, task_id: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """Set ``fields`` (and ``last_update_time``) on a stored task: the task as stored
        now, or None when it was deleted meanwhile (it stays deleted)."""
        with self._store.transaction():
            record = self._store.get("task", task_id)
            if record is None:
                return None
            doc = {**record.doc, **fields, "last_update_time": now_ms()}
            self._store.put("task", Record(task_id, doc))
        return doc

    def tasks(self) -> list[tuple[str, dict[str, Any]]]:
        """Every stored task, oldest first."""
        return [(record.id, record.doc) for record in self._store.scan("task")]

    def connector_of(self, model_id: str) -> ResolvedModel:
        """A model with its connector, credentials unsealed, as it is stored: not deployed
        on the way (a batch job's status and cancel calls, for a model in any state)."""
        record = self._model_record(model_id)
        limiter = record.doc.get("rate_limiter")
        return ResolvedModel(model_id, record.doc["name"], str(record.doc.get("model_state")),
                             self._model_connector(record), parse_rate_limiter(limiter) if limiter else None)

    def _check_routing(self, router_id: str, routing_doc: dict[str, Any]) -> None:
        """A router's members exist (404 naming the first that does not), it forms no cycle,
        and its plain members speak one provider API unless it says otherwise (inside the
        caller's transaction)."""
        routing = parse_routing(routing_doc)
        records: dict[str, Record] = {}

        def routing_of(model_id: str) -> Routing | None:
            record = records.get(model_id) or self._store.get("model", model_id)
            if record is None:
                raise NotFound(f"Failed to find model with the provided model id: {model_id} (in [routing])")
            records[model_id] = record
            return parse_routing(record.doc["routing"]) if "routing" in record.doc else None
        check_graph(router_id, routing, routing_of)
        families = {}
        for member in routing.members:
            record = records[member]
            if "routing" not in record.doc:
                named = self._model_connector(record).parameters.get(LLM_INTERFACE)
                if isinstance(named, str) and named.strip():
                    families[member] = named.strip().lower().split("/", 1)[0]
        check_families(routing, families)

    def _model_connector(self, record: Record) -> Connector:
        """A model's connector, inline or by id, its credentials unsealed."""
        if "connector" in record.doc:
            return parse_connector(_without_times(record.doc["connector"]) |
                                   {"credential": self._unseal(record.secret)})
        return self.connector(record.doc["connector_id"])

    # --- search ----------------------------------------------------------------

    def search(self, kind: str, query: Any, caller: Caller | None = None,
               visible: Callable[[str, Mapping[str, Any]], bool] | None = None) -> dict[str, Any]:
        """ml-commons' ``_search`` over what the caller may reach: the records it may not are
        left out before the query runs, so hits and totals agree with get and predict.
        ``visible``: a kind's own rule (tasks: who owns them)."""
        records = [(r.id, r.doc) for r in self._store.scan(kind)]
        if kind == "model":
            records = self.usable_models(caller, records)
        elif kind == "model_group" and caller is not None and not caller.is_admin:
            records = [(i, d) for i, d in records if may_reach_group(caller, group_access(i, d))]
        if visible is not None:
            records = [(i, d) for i, d in records if visible(i, d)]
        return run_search(kind, records, query)

    # --- helpers ---------------------------------------------------------------

    def _checked_connector(self, body: Any) -> Connector:
        connector = parse_connector(body)
        policy = self._endpoint_policy()
        for url in connector.endpoint_urls():
            policy.check_literal_host(policy.check_url(url))
        return connector

    def _record(self, kind: str, record_id: str, missing: str, empty: str | type[IndexNotFound] | None = None) -> Record:
        """The record, or ml-commons' 404 in its words for that route: ``missing`` when
        the id is unknown, ``empty`` when no record of the kind exists at all (ml-commons'
        index does not exist yet: its own words, or OpenSearch's IndexNotFound)."""
        record = self._store.get(kind, record_id)
        if record is not None:
            return record
        if empty is not None and not self._store.scan(kind):
            if empty is IndexNotFound:
                raise IndexNotFound(f"no such index [{_INDEX[kind]}]")
            raise NotFound(str(empty))
        raise NotFound(missing)

    def _stored_connector(self, doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A model document's connector as stored (inline, or its record's; no credential),
        None for a router or a connector since deleted."""
        if "connector" in doc:
            return doc["connector"]
        record = self._store.get("connector", doc["connector_id"]) if "connector_id" in doc else None
        return record.doc if record is not None else None

    def _connector_record(self, connector_id: str) -> Record:
        # ConnectorAccessControlHelper.getConnector (get and update a connector)
        return self._record("connector", connector_id,
                            f"Failed to find connector with the provided connector id: {connector_id}",
                            "Failed to find connector")

    def _model_record(self, model_id: str, missing: str = "Failed to find model",
                      empty: str | type[IndexNotFound] | None = IndexNotFound) -> Record:
        # MLModelManager.getModel (deploy, predict): "Failed to find model", or the index missing
        return self._record("model", model_id, missing, empty)

    def _connector(self, record: Record) -> Connector:
        return parse_connector(_without_times(record.doc) | {"credential": self._unseal(record.secret)})

    def _unseal(self, secret: str | None) -> dict[str, str]:
        return self._codec.unseal(secret) if secret else {}

    def _set_state(self, record: Record, state: str) -> Record:
        stamp = self._clock()
        doc = {**record.doc, "model_state": state, "last_updated_time": stamp}
        if state == DEPLOYED:
            doc["last_deployed_time"] = stamp
        else:
            doc["last_undeployed_time"] = stamp
        updated = Record(record.id, doc, record.secret)
        self._store.put("model", updated)
        self._invalidate()
        return updated

    def _add_task(self, model_id: str, task_type: str) -> str:
        task_id = new_id()
        stamp = now_ms()
        self._store.put("task", Record(task_id, {
            "model_id": model_id, "task_type": task_type, "function_name": "REMOTE",
            "state": "COMPLETED", "worker_node": [NODE_ID], "create_time": stamp,
            "last_update_time": stamp, "is_async": False}))
        return task_id

    def _invalidate(self) -> None:
        with self._cache_lock:
            self._cache.clear()
            self._cache_generation += 1


def _merged_rate_limiter(stored: Any, given: Any) -> dict[str, Any] | None:
    """``MLRateLimiter.update``: the given ``limit`` and ``unit`` over the stored ones; None
    when nothing is given (an empty one changes nothing: updateValidityPreCheck)."""
    if given is None:
        return None
    if not isinstance(given, dict):
        raise BadRequest("[rate_limiter] must be an object {limit, unit}")
    changes = {key: value for key, value in given.items() if value is not None}
    if not changes:
        return None
    return model_fields.rate_limiter({**(stored if isinstance(stored, dict) else {}), **changes})


def _preset(connector: Mapping[str, Any]) -> dict[str, str] | None:
    """ModelInterfaceUtils' preset for a stored connector document (its first action's
    post-process function, as ml-commons reads it)."""
    actions = connector.get("actions") or [{}]
    parameters = connector.get("parameters") or {}
    return preset_interface(parameters, actions[0].get("post_process_function"))


def _enabled(model: AnyModel) -> AnyModel:
    if not model.enabled:  # TransportPredictionTaskAction: is_enabled false
        raise Forbidden("Model is disabled.")
    return model


def _without_times(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("created_time", "last_updated_time")}
