"""Immutable server configuration and the ml-commons cluster settings we honour."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadRequest


def default_stream_workers() -> int:
    # ml-commons sizes its remote-inference pool at processors x 4: the workers spend
    # their time waiting on sockets, not on the CPU.
    return (os.cpu_count() or 1) * 4


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What `mlstream serve` was started with; fixed for the life of the process."""

    host: str = "127.0.0.1"
    port: int = 9200
    data_dir: Path = field(default_factory=lambda: Path.home() / ".mlstream")
    stream_workers: int = field(default_factory=default_stream_workers)
    # ml-commons' remote-inference queue size.
    stream_backlog: int = 10_000
    # Chunks buffered per stream between the provider reader and the client writer.
    # Small on purpose: a slow client must push back on the provider, not grow memory.
    stream_queue_chunks: int = 64
    trusted_endpoints: tuple[str, ...] = ()
    allow_private_endpoints: bool = False
    # A single write to a client that stays blocked this long means the client stalled.
    client_stall_timeout: float = 60.0
    # SSE comment sent while a committed stream is idle, so proxies keep it open.
    heartbeat_interval: float = 15.0
    # Largest request body accepted (413 beyond).
    max_body_bytes: int = 10 * 1024 * 1024
    # How long SIGTERM lets running streams finish before cancelling them.
    drain_timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in ("stream_workers", "stream_queue_chunks"):
            if getattr(self, name) < 1:
                raise BadRequest(f"{name.replace('_', '-')} must be at least 1")
        if self.stream_backlog < 0:
            raise BadRequest("stream-backlog must not be negative")


# --- cluster settings (GET/PUT /_cluster/settings) ---------------------------------

STREAM_ENABLED = "plugins.ml_commons.stream_enabled"
TRUSTED_ENDPOINTS = "plugins.ml_commons.trusted_connector_endpoints_regex"
PRIVATE_IP_ENABLED = "plugins.ml_commons.connector.private_ip_enabled"

# ml-commons' default trusted endpoints (MLCommonsSettings.ML_COMMONS_TRUSTED_CONNECTOR_ENDPOINTS_REGEX).
DEFAULT_TRUSTED_ENDPOINTS: tuple[str, ...] = (
    r"^https://runtime\.sagemaker\..*[a-z0-9-]\.amazonaws\.com/.*$",
    r"^https://api\.sagemaker\..*[a-z0-9-]\.amazonaws\.com/.*$",
    r"^https://api\.openai\.com/.*$",
    r"^https://api\.cohere\.ai/.*$",
    r"^https://bedrock-runtime\..*[a-z0-9-]\.amazonaws\.com/.*$",
    r"^https://bedrock-agent-runtime\..*[a-z0-9-]\.amazonaws\.com/.*$",
    r"^https://bedrock\..*[a-z0-9-]\.amazonaws\.com/.*$",
    r"^https://textract\..*[a-z0-9-]\.amazonaws\.com$",
    r"^https://comprehend\..*[a-z0-9-]\.amazonaws\.com$",
    r"^https://.*\.openai\.azure\.com/.*$",
    r"^https://api\.deepseek\.com/.*$",
    r"^https://generativelanguage\.googleapis\.com/.*$",
    r"^https://api\.mistral\.ai/.*$",
    r"^https://api\.anthropic\.com/.*$",
)

CLUSTER_SETTING_DEFAULTS: dict[str, Any] = {
    STREAM_ENABLED: True,
    TRUSTED_ENDPOINTS: list(DEFAULT_TRUSTED_ENDPOINTS),
    PRIVATE_IP_ENABLED: False,
}


def validate_cluster_setting(key: str, value: Any) -> Any:
    """Return ``value`` normalised for ``key``; None means "back to the default"."""
    if key not in CLUSTER_SETTING_DEFAULTS:
        raise BadRequest(f"persistent setting [{key}], not recognized")
    if value is None:
        return None
    if key in (STREAM_ENABLED, PRIVATE_IP_ENABLED):
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise BadRequest(f"Failed to parse value [{value}] as only [true] or [false] are allowed for [{key}]")
        return value
    # trusted endpoints: a list of regexes (a single string is a one-element list)
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise BadRequest(f"[{key}] must be a list of regular expressions")
    for pattern in values:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise BadRequest(f"[{key}] has an invalid regular expression [{pattern}]: {exc}") from None
    return values


def flatten_settings(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Turn OpenSearch's nested setting objects into dotted keys (both forms are accepted)."""
    if not isinstance(tree, dict):
        raise BadRequest("settings must be a JSON object")
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_settings(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
