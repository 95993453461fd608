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


def _opt(default: Any = None, help: str = "", *, factory: Any = None) -> Any:  # noqa: A002
    """A setting with the help text shown by ``--help`` and in the example config."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What `mlstream serve` was started with; fixed for the life of the process.

    Every field is a flag (``--stream-workers``), a key of the TOML config file
    (``stream_workers``) and an environment variable (``MLSTREAM_STREAM_WORKERS``).
    """

    host: str = _opt("127.0.0.1", "address to listen on")
    port: int = _opt(9200, "port to listen on; 0 picks a free one")
    data_dir: Path = _opt(help="where the SQLite store and the master key file live",
                          factory=lambda: Path.home() / ".mlstream")
    stream_workers: int = _opt(help="provider readers running at once (default: processors x 4, "
                                    "as ml-commons sizes its remote-inference pool)",
                               factory=default_stream_workers)
    stream_backlog: int = _opt(10_000, "streams that may wait for a reader before new ones get 429")
    # Small on purpose: a slow client must push back on the provider, not grow memory.
    stream_queue_chunks: int = _opt(64, "chunks buffered per stream between provider and client")
    trusted_endpoints: tuple[str, ...] = _opt((), "extra trusted connector URL regexes, on top of "
                                                  "the cluster setting")
    allow_private_endpoints: bool = _opt(False, "let connectors call loopback/private addresses")
    client_stall_timeout: float = _opt(60.0, "seconds one write to a client may stay blocked "
                                             "before the stream is cut")
    heartbeat_interval: float = _opt(15.0, "seconds of provider silence before an SSE ': ping' comment")
    drain_timeout: float = _opt(30.0, "seconds SIGTERM lets open streams finish before cancelling them")
    max_body_bytes: int = _opt(10 * 1024 * 1024, "largest request body accepted (413 beyond)")
    # A slowloris client trickling header bytes never trips a per-read timeout.
    header_timeout: float = _opt(10.0, "seconds for a request line and headers to arrive (slowloris "
                                       "guard); also the idle keep-alive limit")
    tls_cert: Path | None = _opt(None, "PEM certificate (chain) file: serve HTTPS")
    tls_key: Path | None = _opt(None, "PEM private key file for --tls-cert")
    insecure_no_auth: bool = _opt(False, "allow serving without API keys on a non-loopback address")
    log_level: str = _opt("INFO", "DEBUG, INFO, WARNING or ERROR")
    log_format: str = _opt("text", "text or json (one JSON object per line)")

    def __post_init__(self) -> None:
        for name in ("stream_workers", "stream_queue_chunks"):
            if getattr(self, name) < 1:
                raise BadRequest(f"{name.replace('_', '-')} must be at least 1")
        if self.stream_backlog < 0:
            raise BadRequest("stream-backlog must not be negative")
        for name in ("client_stall_timeout", "heartbeat_interval", "header_timeout", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise BadRequest(f"{name.replace('_', '-')} must be greater than 0")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise BadRequest("tls-cert and tls-key go together")
        if self.log_format not in ("text", "json"):
            raise BadRequest("log-format must be text or json")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise BadRequest("log-level must be DEBUG, INFO, WARNING or ERROR")


# --- cluster settings (GET/PUT /_cluster/settings) ---------------------------------

# Where the master key for credentials at rest comes from (mlstream.credentials).
MASTER_KEY_ENV = "MLSTREAM_MASTER_KEY"
MASTER_KEY_FILE = "master.key"

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
