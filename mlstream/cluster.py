"""The ml-commons cluster settings, stored and applied without a restart."""

from __future__ import annotations

import threading
from typing import Any

from .endpoints import EndpointPolicy
from .errors import BadRequest
from .settings import (CLUSTER_SETTING_DEFAULTS, PRIVATE_IP_ENABLED, STREAM_ENABLED,
                       TRUSTED_ENDPOINTS, ServerSettings, flatten_settings,
                       validate_cluster_setting)
from .store import Store


class ClusterSettings:
    """Stored values over defaults, plus what the command line adds on top."""

    def __init__(self, store: Store, server: ServerSettings) -> None:
        self._store = store
        self._server = server
        self._lock = threading.Lock()
        self._persistent = store.get_settings()
        self._transient: dict[str, Any] = {}
        self._policy = self._build_policy()

    def value(self, key: str) -> Any:
        with self._lock:
            return self._effective(key)

    @property
    def stream_enabled(self) -> bool:
        return bool(self.value(STREAM_ENABLED))

    @property
    def endpoint_policy(self) -> EndpointPolicy:
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
        changes = {section: {key: validate_cluster_setting(key, value)
                             for key, value in flatten_settings(body.get(section) or {}).items()}
                   for section in ("persistent", "transient")}
        with self._lock:
            if changes["persistent"]:
                self._store.put_settings(changes["persistent"])
                self._persistent = self._store.get_settings()
            for key, value in changes["transient"].items():
                if value is None:
                    self._transient.pop(key, None)
                else:
                    self._transient[key] = value
            self._policy = self._build_policy()
        return {"acknowledged": True, "persistent": _nest(changes["persistent"]),
                "transient": _nest(changes["transient"])}

    def _effective(self, key: str) -> Any:
        for layer in (self._transient, self._persistent):
            if key in layer:
                return layer[key]
        return CLUSTER_SETTING_DEFAULTS[key]

    def _build_policy(self) -> EndpointPolicy:
        patterns = tuple(self._effective(TRUSTED_ENDPOINTS)) + self._server.trusted_endpoints
        allow_private = self._server.allow_private_endpoints or bool(self._effective(PRIVATE_IP_ENABLED))
        return EndpointPolicy(patterns, allow_private)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree
