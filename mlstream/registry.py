"""Connectors, model groups, models and tasks: the ml-commons resource API over the store.

Every change runs in one store transaction, so a request that fails leaves the
stored state as it was. The predict path reads models through a small cache that
every change here invalidates.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .connectors import (DRY_RUN, DRY_RUN_CONNECTOR_ID, Connector, action_url_with_connector_parameters,
                         parse_connector)
from .credentials import CredentialCodec
from .endpoints import EndpointPolicy
from .errors import BadRequest, Conflict, NotFound
from .ratelimit import RateLimit, parse_rate_limiter
from .search import run_search
from .store import Record, Store
from .usage import Pricing, parse_pricing

NODE_ID = "mlstream"
REGISTERED = "REGISTERED"
DEPLOYED = "DEPLOYED"
ACCESS_MODES = ("public", "private", "restricted")
_MODEL_GROUP_FIELDS = frozenset({"name", "description", "access_mode", "backend_roles", "add_all_backend_roles",
                                 "model_group_id"})
_MODEL_FIELDS = frozenset({
    "name", "function_name", "description", "connector_id", "connector", "model_group_id",
    "rate_limiter", "version", "is_enabled", "guardrails", "interface", "model_format",
    "access_mode", "backend_roles", "add_all_backend_roles",
    "pricing",  # an mlstream extension: prices per million tokens (usage.Pricing)
})


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
    pricing: Pricing | None = None  # None: the model's calls have cost null


class Registry:
    def __init__(self, store: Store, codec: CredentialCodec,
                 endpoint_policy: Callable[[], EndpointPolicy],
                 auto_deploy: Callable[[], bool] = lambda: True) -> None:
        self._store = store
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
        with self._store.transaction():
            self._connector_record(connector_id)
            users = [m.id for m in self._store.scan("model") if m.doc.get("connector_id") == connector_id]
            if users:
                raise Conflict(f"{len(users)} models are still using this connector, please delete "
                               f"or update the models first: {users}")
            self._store.delete("connector", connector_id)

    # --- models ----------------------------------------------------------------

    def register_model(self, body: Any, *, deploy: bool) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - _MODEL_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model")
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise BadRequest("[name] is required and must be a non-empty string")
        function_name = body.get("function_name", "remote")
        if not isinstance(function_name, str) or function_name.lower() != "remote":
            raise BadRequest("[function_name] must be \"remote\": only remote models are served")
        description = body.get("description")
        if description is not None and not isinstance(description, str):
            raise BadRequest("[description] must be a string")
        rate_limiter = parse_rate_limiter(body.get("rate_limiter"))
        pricing = parse_pricing(body.get("pricing"))
        group = body.get("model_group_id")
        if group is not None and not isinstance(group, str):
            raise BadRequest("[model_group_id] must be a string")
        has_id, has_inline = body.get("connector_id") is not None, body.get("connector") is not None
        if has_id == has_inline:
            raise BadRequest("exactly one of [connector_id] or [connector] is required")
        access = _access_fields(body) if group is None else None
        stamp = now_ms()
        doc: dict[str, Any] = {
            "name": name, "algorithm": "REMOTE", "description": description,
            "model_state": DEPLOYED if deploy else REGISTERED,
            "created_time": stamp, "last_updated_time": stamp, "last_registered_time": stamp,
        }
        if deploy:
            doc["last_deployed_time"] = stamp
        if rate_limiter is not None:
            doc["rate_limiter"] = {"limit": rate_limiter.limit_text, "unit": rate_limiter.unit}
        if pricing is not None:
            doc["pricing"] = pricing.to_doc()
        secret = None
        with self._store.transaction():
            group_id, version = self._next_version(group, name, description, access)
            doc["model_group_id"], doc["model_version"] = group_id, str(version)
            if has_id:
                connector_id = body["connector_id"]
                if not isinstance(connector_id, str):
                    raise BadRequest("[connector_id] must be a string")
                self._connector_record(connector_id)
                doc["connector_id"] = connector_id
            else:
                connector = self._checked_connector(body["connector"])
                doc["connector"] = connector.public_doc()
                secret = self._codec.seal(dict(connector.credential))
            model_id = new_id()
            self._store.put("model", Record(model_id, doc, secret))
            task_id = self._add_task(model_id, "REGISTER_MODEL")
            if deploy:
                self._add_task(model_id, "DEPLOY_MODEL")
        return {"task_id": task_id, "status": "CREATED", "model_id": model_id}

    def _next_version(self, group_id: str | None, model_name: str, description: str | None,
                      access: dict[str, Any] | None) -> tuple[str, int]:
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
                             "created_time": stamp, "last_updated_time": stamp}
                if description is not None:
                    group_doc["description"] = description
                record = Record(new_id(), group_doc)
        version = int(record.doc.get("latest_version", 0)) + 1
        self._store.put("model_group", Record(record.id, {**record.doc, "latest_version": version,
                                                          "last_updated_time": now_ms()}))
        return record.id, version

    # --- model groups ------------------------------------------------------------

    def register_model_group(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - _MODEL_GROUP_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model group")
        name = _group_name(body.get("name"))
        description = body.get("description")
        if description is not None and not isinstance(description, str):
            raise BadRequest("[description] must be a string")
        wanted_id = body.get("model_group_id")
        if wanted_id is not None and (not isinstance(wanted_id, str) or not wanted_id.strip()):
            raise BadRequest("[model_group_id] must be a non-empty string")
        stamp = now_ms()
        doc: dict[str, Any] = {"name": name, "latest_version": 0, **_access_fields(body),
                               "created_time": stamp, "last_updated_time": stamp}
        if description is not None:
            doc["description"] = description
        with self._store.transaction():
            self._check_group_name_free(name)
            group_id = wanted_id or new_id()
            if self._store.get("model_group", group_id) is not None:
                raise Conflict(f"A model group with the id [{group_id}] already exists")
            self._store.put("model_group", Record(group_id, doc))
        return {"model_group_id": group_id, "status": "CREATED"}

    def get_model_group(self, group_id: str) -> dict[str, Any]:
        return self._model_group_record(group_id).doc

    def update_model_group(self, group_id: str, changes: Any) -> dict[str, Any]:
        if not isinstance(changes, dict) or not changes:
            raise BadRequest("the update must be a non-empty JSON object")
        unknown = sorted(set(changes) - (_MODEL_GROUP_FIELDS - {"model_group_id"}))
        if unknown:
            raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model group update")
        with self._store.transaction():
            record = self._model_group_record(group_id)
            doc = dict(record.doc)
            if changes.get("name") is not None:
                name = _group_name(changes["name"])
                if name != doc.get("name"):
                    self._check_group_name_free(name)
                    doc["name"] = name
            description = changes.get("description")
            if description is not None:
                if not isinstance(description, str):
                    raise BadRequest("[description] must be a string")
                if description.strip():
                    doc["description"] = description
            if any(key in changes for key in ("access_mode", "backend_roles", "add_all_backend_roles")):
                current = {"access_mode": doc.get("access", "public"), "backend_roles": doc.get("backend_roles")}
                if str(changes.get("access_mode", "restricted")).lower() != "restricted":
                    current["backend_roles"] = None  # as ml-commons: leaving restricted drops the roles
                doc = {k: v for k, v in doc.items() if k not in ("access", "backend_roles")}
                doc.update(_access_fields({**current, **changes}))
            doc["last_updated_time"] = now_ms()
            self._store.put("model_group", Record(group_id, doc))
        return {"status": "Updated"}

    def delete_model_group(self, group_id: str) -> None:
        with self._store.transaction():
            self._model_group_record(group_id)
            if any(m.doc.get("model_group_id") == group_id for m in self._store.scan("model")):
                raise Conflict("Cannot delete the model group when it has associated model versions")
            self._store.delete("model_group", group_id)

    def _model_group_record(self, group_id: str) -> Record:
        record = self._store.get("model_group", group_id)
        if record is None:
            raise NotFound(f"Failed to find model group with ID: {group_id}")
        return record

    def _model_group_named(self, name: str) -> Record | None:
        return next((g for g in self._store.scan("model_group") if g.doc.get("name") == name), None)

    def _check_group_name_free(self, name: str) -> None:
        taken = self._model_group_named(name)
        if taken is not None:
            raise BadRequest(f"The name you provided is already being used by a model group with ID: {taken.id}.")

    def get_model(self, model_id: str) -> dict[str, Any]:
        return self._model_record(model_id).doc

    def deploy_model(self, model_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._set_state(self._model_record(model_id), DEPLOYED)
            task_id = self._add_task(model_id, "DEPLOY_MODEL")
        return {"task_id": task_id, "task_type": "DEPLOY_MODEL", "status": "COMPLETED"}

    def undeploy_model(self, model_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._set_state(self._model_record(model_id), REGISTERED)
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
                records = [self._model_record(model_id) for model_id in dict.fromkeys(model_ids)]
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
            record = self._model_record(model_id)
            if record.doc.get("model_state") == DEPLOYED:
                raise Conflict("Model cannot be deleted in deploying or deployed state. "
                               "Try undeploy model first then delete")
            self._store.delete("model", model_id)
            self._store.delete("controller", model_id)  # as ml-commons: its controller goes with it
        self._invalidate()

    def resolve(self, model_id: str) -> ResolvedModel:
        """The model for a predict call, deploying it on first use (ml-commons' auto-deploy)."""
        counter = self._store.change_counter()
        with self._cache_lock:
            if counter != self._seen_counter:
                self._cache.clear()
                self._cache_generation += 1
                self._seen_counter = counter
            cached = self._cache.get(model_id)
            generation = self._cache_generation
        if cached is not None:
            return cached
        with self._store.transaction():
            record = self._model_record(model_id)
            if record.doc.get("model_state") != DEPLOYED:
                if not self._auto_deploy():
                    raise BadRequest(f"Model not ready yet. Please deploy the model first: {model_id} "
                                     "(plugins.ml_commons.model_auto_deploy.enable is false)")
                record = self._set_state(record, DEPLOYED)
            if "connector" in record.doc:
                connector = parse_connector(_without_times(record.doc["connector"]) |
                                            {"credential": self._unseal(record.secret)})
            else:
                connector = self._connector(self._connector_record(record.doc["connector_id"]))
        limiter = record.doc.get("rate_limiter")
        resolved = ResolvedModel(model_id, record.doc["name"], DEPLOYED, connector,
                                 parse_rate_limiter(limiter) if limiter else None,
                                 parse_pricing(record.doc.get("pricing")))
        with self._cache_lock:
            if generation == self._cache_generation:
                self._cache[model_id] = resolved
        return resolved

    # --- tasks -----------------------------------------------------------------

    def get_task(self, task_id: str) -> dict[str, Any]:
        record = self._store.get("task", task_id)
        if record is None:
            raise NotFound(f"Failed to find task with the provided task id: {task_id}")
        return record.doc

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
        if "connector" in record.doc:
            connector = parse_connector(_without_times(record.doc["connector"]) |
                                        {"credential": self._unseal(record.secret)})
        else:
            connector = self._connector(self._connector_record(record.doc["connector_id"]))
        limiter = record.doc.get("rate_limiter")
        return ResolvedModel(model_id, record.doc["name"], str(record.doc.get("model_state")), connector,
                             parse_rate_limiter(limiter) if limiter else None)

    # --- search ----------------------------------------------------------------

    def search(self, kind: str, query: Any) -> dict[str, Any]:
        return run_search(kind, [(r.id, r.doc) for r in self._store.scan(kind)], query)

    # --- helpers ---------------------------------------------------------------

    def _checked_connector(self, body: Any) -> Connector:
        connector = parse_connector(body)
        policy = self._endpoint_policy()
        for action in connector.actions:
            host = policy.check_url(action_url_with_connector_parameters(connector, action))
            policy.check_literal_host(host)
        return connector

    def _connector_record(self, connector_id: str) -> Record:
        record = self._store.get("connector", connector_id)
        if record is None:
            raise NotFound(f"Failed to find connector with the provided connector id: {connector_id}")
        return record

    def _model_record(self, model_id: str) -> Record:
        record = self._store.get("model", model_id)
        if record is None:
            raise NotFound(f"Failed to find model with the provided model id: {model_id}")
        return record

    def _connector(self, record: Record) -> Connector:
        return parse_connector(_without_times(record.doc) | {"credential": self._unseal(record.secret)})

    def _unseal(self, secret: str | None) -> dict[str, str]:
        return self._codec.unseal(secret) if secret else {}

    def _set_state(self, record: Record, state: str) -> Record:
        stamp = now_ms()
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


def _group_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("[name] is required and must be a non-empty string")
    return name.strip()


def _access_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A model group's ``access`` (and ``backend_roles``) from ml-commons' request fields.

    Recorded as given, for clients that read them back; mlstream has no users or backend
    roles to enforce them with (docs/api.md, "Model groups").
    """
    mode = body.get("access_mode")
    roles = body.get("backend_roles")
    add_all = body.get("add_all_backend_roles")
    if add_all is not None and not isinstance(add_all, bool):
        raise BadRequest("[add_all_backend_roles] must be true or false")
    if add_all:
        raise BadRequest("[add_all_backend_roles] cannot be true: mlstream has no users, so no backend roles to add")
    if roles is not None and (not isinstance(roles, list) or not all(isinstance(r, str) for r in roles)):
        raise BadRequest("[backend_roles] must be a list of strings")
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


def _without_times(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("created_time", "last_updated_time")}
