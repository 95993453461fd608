"""Connectors, models and tasks: the ml-commons resource API over the store.

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

NODE_ID = "mlstream"
REGISTERED = "REGISTERED"
DEPLOYED = "DEPLOYED"
_MODEL_FIELDS = frozenset({
    "name", "function_name", "description", "connector_id", "connector", "model_group_id",
    "rate_limiter", "version", "is_enabled", "guardrails", "interface", "model_format",
    "access_mode", "backend_roles", "add_all_backend_roles",
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


class Registry:
    def __init__(self, store: Store, codec: CredentialCodec,
                 endpoint_policy: Callable[[], EndpointPolicy]) -> None:
        self._store = store
        self._codec = codec
        self._endpoint_policy = endpoint_policy
        # Guards the resolved-model cache: dict lookups and updates only. A miss reads
        # the store (its own lock) with this lock released.
        self._cache_lock = threading.Lock()
        self._cache: dict[str, ResolvedModel] = {}
        # Bumped by every invalidation: a miss read before one must not fill the cache
        # after it (an undeployed model would go on serving from a stale entry).
        self._cache_generation = 0

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
        group = body.get("model_group_id")
        if group is not None and not isinstance(group, str):
            raise BadRequest("[model_group_id] must be a string")
        has_id, has_inline = body.get("connector_id") is not None, body.get("connector") is not None
        if has_id == has_inline:
            raise BadRequest("exactly one of [connector_id] or [connector] is required")
        stamp = now_ms()
        doc: dict[str, Any] = {
            "name": name, "model_group_id": group or new_id(), "algorithm": "REMOTE",
            "model_version": "1", "description": description,
            "model_state": DEPLOYED if deploy else REGISTERED,
            "created_time": stamp, "last_updated_time": stamp, "last_registered_time": stamp,
        }
        if deploy:
            doc["last_deployed_time"] = stamp
        if rate_limiter is not None:
            doc["rate_limiter"] = {"limit": rate_limiter.limit_text, "unit": rate_limiter.unit}
        secret = None
        with self._store.transaction():
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

    def delete_model(self, model_id: str) -> None:
        with self._store.transaction():
            record = self._model_record(model_id)
            if record.doc.get("model_state") == DEPLOYED:
                raise Conflict("Model cannot be deleted in deploying or deployed state. "
                               "Try undeploy model first then delete")
            self._store.delete("model", model_id)
        self._invalidate()

    def resolve(self, model_id: str) -> ResolvedModel:
        """The model for a predict call, deploying it on first use (ml-commons' auto-deploy)."""
        with self._cache_lock:
            cached = self._cache.get(model_id)
            generation = self._cache_generation
        if cached is not None:
            return cached
        with self._store.transaction():
            record = self._model_record(model_id)
            if record.doc.get("model_state") != DEPLOYED:
                record = self._set_state(record, DEPLOYED)
            if "connector" in record.doc:
                connector = parse_connector(_without_times(record.doc["connector"]) |
                                            {"credential": self._unseal(record.secret)})
            else:
                connector = self._connector(self._connector_record(record.doc["connector_id"]))
        limiter = record.doc.get("rate_limiter")
        resolved = ResolvedModel(model_id, record.doc["name"], DEPLOYED, connector,
                                 parse_rate_limiter(limiter) if limiter else None)
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


def _without_times(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("created_time", "last_updated_time")}
