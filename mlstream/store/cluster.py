"""The cluster this one node makes: its identity, and the ml-commons cluster settings,
stored and applied without a restart."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import BadRequest, StoreError
from ..settings.endpoints import EndpointPolicy
from ..settings.server import (CLUSTER_SETTING_DEFAULTS, PRIVATE_IP_ENABLED, STREAM_ENABLED, TRUSTED_ENDPOINTS,
                               ServerSettings, flatten_settings, matching_settings, validate_cluster_setting)
from .sqlite import Record, Store

CLUSTER_NAME = "mlstream"
_IDENTITY = "cluster"  # the meta record holding the cluster's uuid


def cluster_uuid(store: Store) -> str:
    """The cluster's uuid: made once per data directory (OpenSearch's 22-character
    URL-safe form), the same across restarts."""
    with store.transaction():
        record = store.get("meta", _IDENTITY)
        if record is None:
            value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            record = Record(_IDENTITY, {"cluster_uuid": value})
            store.put("meta", record)
    return record.doc["cluster_uuid"]


class ClusterSettings:
    """Stored values over defaults, plus what the command line adds on top."""

    def __init__(self, store: Store, server: ServerSettings) -> None:
        self._store = store
        self._server = server
        # Guards the three values below, read on every predict. Only dict work runs under
        # it; the store write of an update runs under _update_lock, before the swap.
        self._lock = threading.Lock()
        # Serialises updates (one admin PUT at a time); the hot path never takes it.
        self._update_lock = threading.Lock()
        self._seen_counter = store.change_counter()
        self._persistent = store.get_settings()
        self._transient: dict[str, Any] = {}
        self._policy = self._build_policy(self._persistent, self._transient)
        self._listeners: list[tuple[str, Callable[[], None]]] = []

    def on_update(self, key: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` after an update through this process sets or resets ``key``
        (OpenSearch's addSettingsUpdateConsumer). Another process's change is only read, at
        the next ``value``: it calls nothing here."""
        self._listeners.append((key, callback))

    def value(self, key: str) -> Any:
        self._follow_store()
        with self._lock:
            return self._effective(key)

    def _follow_store(self) -> None:
        """Reload the persistent settings when another process or instance changed the store.

        Costs one change-counter read when nothing changed. A store that cannot be read
        leaves the values as they were (whatever needs the store answers 503 itself)."""
        try:
            counter = self._store.change_counter()
            if counter == self._seen_counter:
                return
            persistent = self._store.get_settings()
        except StoreError:
            return
        if not self._update_lock.acquire(blocking=False):
            return  # an update is writing; it swaps in fresh values itself
        try:
            with self._lock:
                transient = self._transient
            policy = self._build_policy(persistent, transient)
            with self._lock:
                self._persistent, self._policy, self._seen_counter = persistent, policy, counter
        finally:
            self._update_lock.release()

    @property
    def stream_enabled(self) -> bool:
        return bool(self.value(STREAM_ENABLED))

    @property
    def endpoint_policy(self) -> EndpointPolicy:
        self._follow_store()
        return self._policy

    def to_body(self, *, include_defaults: bool, flat: bool) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {"persistent": dict(self._persistent),
                                    "transient": dict(self._transient)}
        if include_defaults:
            body["defaults"] = {k: v for k, v in CLUSTER_SETTING_DEFAULTS.items()
                                if k not in body["persistent"] and k not in body["transient"]}
        return body if flat else {section: _nest(values) for section, values in body.items()}

    def update(self, body: Any) -> dict[str, Any]:
        """Apply a PUT body: all of it, or (on any bad key or value) none of it."""
        if not isinstance(body, dict) or not body:
            raise BadRequest("the body must hold [persistent] and/or [transient] settings")
        unknown = sorted(set(body) - {"persistent", "transient"})
        if unknown:
            raise BadRequest(f"unknown section [{', '.join(unknown)}]: use persistent or transient")
        changes = {section: _changes(section, body.get(section) or {}) for section in ("persistent", "transient")}
        with self._update_lock:
            persistent = self._persistent
            if changes["persistent"]:
                self._store.put_settings(changes["persistent"])
                persistent = self._store.get_settings()
            with self._lock:
                transient = dict(self._transient)
            for key, value in changes["transient"].items():
                if value is None:
                    transient.pop(key, None)
                else:
                    transient[key] = value
            policy = self._build_policy(persistent, transient)
            with self._lock:
                self._persistent, self._transient, self._policy = persistent, transient, policy
        changed = changes["persistent"].keys() | changes["transient"].keys()
        for key, callback in self._listeners:
            if key in changed:
                callback()
        # As OpenSearch answers: what was set; a reset (null) is not echoed.
        return {"acknowledged": True,
                **{section: _nest({k: v for k, v in values.items() if v is not None})
                   for section, values in changes.items()}}

    def _effective(self, key: str) -> Any:
        return _effective(key, self._persistent, self._transient)

    def _build_policy(self, persistent: dict[str, Any], transient: dict[str, Any]) -> EndpointPolicy:
        patterns = tuple(_effective(TRUSTED_ENDPOINTS, persistent, transient)) + self._server.trusted_endpoints
        allow_private = (self._server.allow_private_endpoints
                         or bool(_effective(PRIVATE_IP_ENABLED, persistent, transient)))
        return EndpointPolicy(patterns, allow_private)


def _changes(section: str, tree: Any) -> dict[str, Any]:
    """A section's settings, validated; ``"prefix.*": null`` resets every known key under it."""
    changes: dict[str, Any] = {}
    for key, value in flatten_settings(tree).items():
        if key.endswith("*") and value is None:
            changes.update(dict.fromkeys(matching_settings(key)))
        else:
            changes[key] = validate_cluster_setting(key, value, section)
    return changes


def _effective(key: str, persistent: dict[str, Any], transient: dict[str, Any]) -> Any:
    for layer in (transient, persistent):
        if key in layer:
            return layer[key]
    return CLUSTER_SETTING_DEFAULTS[key]


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree
