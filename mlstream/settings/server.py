"""Immutable server configuration and the ml-commons cluster settings we honour."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import BadRequest


def default_stream_workers() -> int:
    # ml-commons sizes its remote-inference pool at processors x 4: the workers spend
    # their time waiting on sockets, not on the CPU.
    return (os.cpu_count() or 1) * 4


def _opt(default: Any = None, help: str = "", *, factory: Any = None) -> Any:  # noqa: A002
    """A setting with the help text shown by ``--help`` and in the example config."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def redacted_url(url: str) -> str:
    """``url`` without its password, for messages and --print-config."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


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
    store: str = _opt("", "where state lives: empty for SQLite in data-dir, or a postgresql:// URL "
                          "shared by many instances (needs mlstream[postgres]; prefer PGPASSWORD or "
                          "~/.pgpass to a password in the URL)")
    workers: str = _opt("1", "server processes sharing the port (SO_REUSEPORT), each with its own "
                             "stream-workers; a number, or auto for one per processor")
    stream_workers: int = _opt(help="provider readers running at once, per worker process (default: "
                                    "processors x 4, as ml-commons sizes its remote-inference pool)",
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
    responses_ttl_days: float = _opt(30.0, "days a stored /v1/responses response (store: true) is kept, "
                                           "for previous_response_id and GET /v1/responses/<id>")
    cache_mode: str = _opt("off", "the response cache of models that set no cache of their own: off, or "
                                  "exact (identical requests answered from the store)")
    cache_ttl_s: float = _opt(3600.0, "seconds an entry of the server's default cache is kept")
    cache_max_entry_bytes: int = _opt(1024 * 1024, "largest answer the response cache keeps (bigger ones "
                                                   "are not stored)")
    cache_max_bytes: int = _opt(256 * 1024 * 1024, "size of the response cache: past it the oldest entries "
                                                   "go")
    max_body_bytes: int = _opt(10 * 1024 * 1024, "largest request body accepted (413 beyond)")
    # A slowloris client trickling header bytes never trips a per-read timeout.
    header_timeout: float = _opt(10.0, "seconds for a request line and headers to arrive (slowloris "
                                       "guard); also the idle keep-alive limit")
    tls_cert: Path | None = _opt(None, "PEM certificate (chain) file: serve HTTPS")
    tls_key: Path | None = _opt(None, "PEM private key file for --tls-cert")
    insecure_no_auth: bool = _opt(False, "allow serving without API keys on a non-loopback address")
    log_level: str = _opt("INFO", "DEBUG, INFO, WARNING or ERROR")
    log_format: str = _opt("text", "text or json (one JSON object per line)")
    otel_endpoint: str = _opt("", "OTLP/HTTP base URL to export traces and metrics to (/v1/traces and "
                                  "/v1/metrics under it; needs mlstream[otel]); empty: the standard "
                                  "OTEL_EXPORTER_OTLP_ENDPOINT if set, else none")
    # Prompts and answers may hold personal data: never recorded unless asked.
    otel_capture_content: bool = _opt(False, "record prompts and answers on provider-call spans "
                                             "(gen_ai.input.messages, gen_ai.output.messages)")

    def __post_init__(self) -> None:
        for name in ("stream_workers", "stream_queue_chunks"):
            if getattr(self, name) < 1:
                raise BadRequest(f"{name.replace('_', '-')} must be at least 1")
        if self.stream_backlog < 0:
            raise BadRequest("stream-backlog must not be negative")
        for name in ("client_stall_timeout", "heartbeat_interval", "header_timeout", "max_body_bytes",
                     "responses_ttl_days", "cache_ttl_s", "cache_max_entry_bytes", "cache_max_bytes"):
            if getattr(self, name) <= 0:
                raise BadRequest(f"{name.replace('_', '-')} must be greater than 0")
        if self.workers != "auto" and not (self.workers.isdigit() and int(self.workers) >= 1):
            raise BadRequest("workers must be a whole number of at least 1, or auto")
        if self.store and not self.store.startswith(("postgresql://", "postgres://")):
            raise BadRequest("store must be empty (SQLite in data-dir) or a postgresql:// URL")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise BadRequest("tls-cert and tls-key go together")
        if self.cache_mode not in ("off", "exact"):
            raise BadRequest("cache-mode must be off or exact")
        if self.log_format not in ("text", "json"):
            raise BadRequest("log-format must be text or json")
        if self.otel_endpoint and not self.otel_endpoint.startswith(("http://", "https://")):
            raise BadRequest("otel-endpoint must be an http:// or https:// URL")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise BadRequest("log-level must be DEBUG, INFO, WARNING or ERROR")


# --- cluster settings (GET/PUT /_cluster/settings) ---------------------------------

# Where the master key for credentials at rest comes from (mlstream.access.credentials).
MASTER_KEY_ENV = "MLSTREAM_MASTER_KEY"
MASTER_KEY_FILE = "master.key"

STREAM_ENABLED = "plugins.ml_commons.stream_enabled"
TRUSTED_ENDPOINTS = "plugins.ml_commons.trusted_connector_endpoints_regex"
PRIVATE_IP_ENABLED = "plugins.ml_commons.connector.private_ip_enabled"
AUTO_DEPLOY = "plugins.ml_commons.model_auto_deploy.enable"
SYNC_UP_INTERVAL = "plugins.ml_commons.sync_up_job_interval_in_seconds"

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

ML = "plugins.ml_commons."
_NOT_APPLICABLE = "stored, no effect: mlstream is one process serving remote models only"


@dataclass(frozen=True, slots=True)
class ClusterSetting:
    """One ``plugins.ml_commons.*`` cluster setting ml-commons documents (MLCommonsSettings)."""

    key: str
    kind: str            # bool, int, float, string, regex (one pattern), list, regex_list, bytes
    default: Any
    effect: str = _NOT_APPLICABLE  # what mlstream does with it (the table in docs/api.md)
    minimum: float | None = None
    maximum: float | None = None


def _bools(effect: str, **defaults: bool) -> list[ClusterSetting]:
    return [ClusterSetting(ML + key.replace("__", "."), "bool", value, effect) for key, value in defaults.items()]


def _ints(effect: str, **ranges: tuple[int, int | None, int | None]) -> list[ClusterSetting]:
    return [ClusterSetting(ML + key.replace("__", "."), "int", default, effect, low, high)
            for key, (default, low, high) in ranges.items()]


_LOCAL_MODELS = "stored, no effect: mlstream serves remote models only (nothing is uploaded, loaded or run locally)"
_NODES = "stored, no effect: mlstream is a single node, every model runs on it"
_FEATURES = "stored, no effect: mlstream has no agents, memory, tools, MCP or batch ingestion"
_BATCH = "acted on: batch predict ([its section](#batch-predict))"
_ACCESS = "stored, no effect: mlstream has API keys and roles, not per-user resource access control"
_MEMORY = "stored, no effect: mlstream is not a JVM and has no circuit breakers"

# Every dynamic ml-commons setting, with ml-commons' default and bounds. Order: docs/api.md's table.
CLUSTER_SETTINGS: dict[str, ClusterSetting] = {setting.key: setting for setting in [
    ClusterSetting(STREAM_ENABLED, "bool", True,
                   "acted on: false refuses `_predict/stream` with 400 (default true here, false in ml-commons)"),
    ClusterSetting(TRUSTED_ENDPOINTS, "regex_list", list(DEFAULT_TRUSTED_ENDPOINTS),
                   "acted on: a connector URL must match one, at create time and before every call"),
    ClusterSetting(PRIVATE_IP_ENABLED, "bool", False,
                   "acted on: true lets connectors call loopback and private addresses"),
    *_bools(_ACCESS, model_access_control_enabled=False, connector_access_control_enabled=False),
    ClusterSetting(AUTO_DEPLOY, "bool", True, "acted on: false makes a predict on a model that is not deployed "
                                              "a 400 instead of deploying it"),
    *_bools("stored, no effect: remote inference is what mlstream does", remote_inference__enabled=True),
    *_bools(_NODES, only_run_on_ml_node=True, allow_custom_deployment_plan=False, model_auto_redeploy__enable=True),
    *_bools(_LOCAL_MODELS, enable_inhouse_python_model=False, allow_registering_model_via_url=False,
            allow_registering_model_via_local_file=False, local_model__enabled=True, controller_enabled=True,
            safe_delete_model=False),
    *_bools(_BATCH, offline_batch_inference_enabled=True),
    *_bools(_FEATURES, offline_batch_ingestion_enabled=True, index_insight_feature_enabled=False, memory_feature_enabled=True, mcp_connector_enabled=False,
            mcp_server_enabled=False, rag_pipeline_feature_enabled=True, agent_framework_enabled=True,
            unified_agent_api_enabled=False, agentic_search_template_enabled=False, execute_tools_enabled=True,
            agentic_memory_enabled=True, remote_agentic_memory_enabled=False, memory__retention_enabled=False,
            mcp_header_passthrough_enabled=False, ag_ui_enabled=False),
    *_bools("stored, no effect: see `/metrics` and `_plugins/_ml/stats` for what mlstream counts",
            metrics_static_collection_enabled=False),
    *_ints(_NODES, max_model_on_node=(10, 0, 10000), max_register_model_tasks_per_node=(10, 0, 10),
           max_deploy_model_tasks_per_node=(10, 0, 10), max_ml_task_per_node=(10, 0, 10000)),
    *_ints("acted on: how often deployed models are checked against their `deploy_setting.model_ttl_minutes` "
           "(MLSyncUpCron's cadence); 0 stops the check", sync_up_job_interval_in_seconds=(10, 0, 86400)),
    *_ints(_NODES, ml_task_timeout_in_seconds=(600, 1, 86400), model_auto_redeploy__lifetime_retry_times=(3, None, None)),
    *_ints(_BATCH, max_batch_inference_tasks=(100, 0, 10000)),
    *_ints(_FEATURES, max_batch_ingestion_tasks=(100, 0, 10000),
           batch_ingestion_bulk_size=(500, 100, 100000), memory__retention_job_interval_hours=(24, 1, 168),
           memory__retention_job_throttle_seconds=(5, 1, 60), memory__orphan_ttl_days=(7, 1, 365),
           memory__working_memory_ttl_days=(-1, -1, 365), memory__default_session_retention_days=(-1, -1, 3650),
           memory__default_session_max_count=(-1, -1, 1000000),
           memory__default_long_term_max_count=(-1, -1, 1000000),
           memory__default_history_max_count=(-1, -1, 10000000)),
    *_ints("stored, no effect: profile statistics are kept for every request",
           monitoring_request_count=(100, 0, 10_000_000)),
    *_ints(_MEMORY, native_memory_threshold=(90, 0, 100), jvm_heap_memory_threshold=(85, 0, 100)),
    *_ints("stored, no effect: the request body limit is `--max-body-bytes`", max_json_size=(100_000_000, -1, None)),
    ClusterSetting(ML + "model_auto_redeploy_success_ratio", "float", 0.8, _NODES, 0.0, 1.0),
    ClusterSetting(ML + "task_dispatch_policy", "string", "round_robin", _NODES),
    ClusterSetting(ML + "exclude_nodes._name", "string", "", _NODES),
    ClusterSetting(ML + "disk_free_space_threshold", "bytes", "5gb", _MEMORY),
    ClusterSetting(ML + "trusted_url_regex", "regex",
                   "^(https?|ftp|file)://[-a-zA-Z0-9+&@#/%?=~_|!:,.;]*[-a-zA-Z0-9+&@#/%=~_|]", _LOCAL_MODELS),
    ClusterSetting(ML + "trusted_connector_private_endpoints_regex", "regex_list", [],
                   "stored, no effect: private addresses are allowed by `connector.private_ip_enabled` or "
                   "`--allow-private-endpoints`"),
    ClusterSetting(ML + "connector.restricted_ip_patterns", "list", [],
                   "stored, no effect: loopback, private, link-local and reserved addresses are always refused "
                   "unless allowed"),
    ClusterSetting(ML + "task_dispatcher.eligible_node_role.remote_model", "list", ["data", "ml"], _NODES),
    ClusterSetting(ML + "task_dispatcher.eligible_node_role.local_model", "list", ["data", "ml"], _NODES),
    ClusterSetting(ML + "remote_job.status_field", "list", ["status", "Status", "TransformJobStatus"], _BATCH),
    *[ClusterSetting(ML + f"remote_job.status_regex.{state}", "regex", pattern, _BATCH)
      for state, pattern in (("completed", "(complete|completed|partiallyCompleted)"),
                             ("cancelled", "(stopped|cancelled)"), ("cancelling", "(stopping|cancelling)"),
                             ("expired", "(expired|timeout)"), ("failed", "(failed)"))],
]}

# ml-commons settings that exist but cannot change on a running cluster.
STATIC_CLUSTER_SETTINGS = frozenset({ML + "multi_tenancy_enabled", ML + "master_key_cache_ttl_minutes",
                                     ML + "metrics_collection_enabled"})

CLUSTER_SETTING_DEFAULTS: dict[str, Any] = {key: setting.default for key, setting in CLUSTER_SETTINGS.items()}

_BYTE_SIZE = re.compile(r"(?i)\s*([0-9]+(?:\.[0-9]+)?)\s*(b|kb|mb|gb|tb|pb)?\s*")


def validate_cluster_setting(key: str, value: Any, section: str = "persistent") -> Any:
    """Return ``value`` normalised for ``key``; None means "back to the default"."""
    setting = CLUSTER_SETTINGS.get(key)
    if setting is None:
        if key in STATIC_CLUSTER_SETTINGS:
            raise BadRequest(f"{section} setting [{key}], not dynamically updateable")
        raise BadRequest(f"{section} setting [{key}], not recognized")
    if value is None:
        return None
    kind = setting.kind
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise BadRequest(f"Failed to parse value [{value}] as only [true] or [false] are allowed for [{key}]")
        return value
    if kind in ("int", "float"):
        return _number(setting, value)
    if kind in ("string", "regex", "bytes"):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BadRequest(f"[{key}] must be a string")
        text = str(value)
        if kind == "regex":
            _check_patterns(key, [text])
        if kind == "bytes" and not _BYTE_SIZE.fullmatch(text):
            raise BadRequest(f"failed to parse setting [{key}] with value [{text}] as a size in bytes")
        return text
    # lists: a single string is a one-element list
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise BadRequest(f"[{key}] must be a list of strings")
    if kind == "regex_list":
        _check_patterns(key, values)
    return values


def _number(setting: ClusterSetting, value: Any) -> int | float:
    parse = int if setting.kind == "int" else float
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadRequest(f"Failed to parse value [{value}] for setting [{setting.key}]")
    try:
        number = parse(value) if isinstance(value, str) or setting.kind == "float" else value
    except ValueError:
        raise BadRequest(f"Failed to parse value [{value}] for setting [{setting.key}]") from None
    if setting.kind == "int" and not isinstance(number, int):
        raise BadRequest(f"Failed to parse value [{value}] for setting [{setting.key}]")
    if setting.minimum is not None and number < setting.minimum:
        raise BadRequest(f"Failed to parse value [{value}] for setting [{setting.key}] must be >= {setting.minimum}")
    if setting.maximum is not None and number > setting.maximum:
        raise BadRequest(f"Failed to parse value [{value}] for setting [{setting.key}] must be <= {setting.maximum}")
    return number


def _check_patterns(key: str, patterns: list[str]) -> None:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise BadRequest(f"[{key}] has an invalid regular expression [{pattern}]: {exc}") from None


def matching_settings(pattern: str) -> list[str]:
    """The known keys a reset pattern names: the key itself, or ``prefix*`` for many."""
    if pattern.endswith("*"):
        return [key for key in CLUSTER_SETTINGS if key.startswith(pattern[:-1])]
    return [pattern]


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
