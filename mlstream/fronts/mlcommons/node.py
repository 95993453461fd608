"""What mlstream says about itself as an OpenSearch node: ``GET /``, nodes info (what
sniffing clients read), cluster health, ``_cat/plugins``, ML stats and profile.

Each is the document OpenSearch (and ml-commons) answers, filled with what is true
of this one process: its bound address, its counters, its deployed models. Where
OpenSearch has a field mlstream has nothing behind (a JVM heap, shards), the field
is left out rather than invented.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

from ... import __version__
from ...store.cluster import CLUSTER_NAME
from ...errors import BadRequest
from ...metrics import PredictionCounts
from ...models.registry import NODE_ID

# The OpenSearch release whose ml-commons REST API mlstream speaks: the first with
# _predict/stream. Clients read version.number to choose request shapes.
OPENSEARCH_VERSION = "3.3.0"
ML_PLUGIN = ("opensearch-ml", f"{OPENSEARCH_VERSION}.0")
ROLES = ["ml"]
NODE_METRICS = ("http", "os", "plugins", "process", "settings", "jvm", "thread_pool", "transport", "ingest",
                "aggregations", "indices", "search_pipelines")
_THIS_NODE = frozenset({"_all", "_local", "_cluster_manager", "_master", "*", NODE_ID})
NODE_STATS = ("ml_request_count", "ml_failure_count", "ml_executing_task_count", "ml_deployed_model_count")
CLUSTER_STATS = ("ml_model_count", "ml_connector_count")


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    cluster_uuid: str
    host: str           # the bound address (may be a wildcard)
    port: int
    max_body_bytes: int


def root(node: NodeIdentity) -> dict[str, Any]:
    return {"name": NODE_ID, "cluster_name": CLUSTER_NAME, "cluster_uuid": node.cluster_uuid,
            "version": {"distribution": "opensearch", "number": OPENSEARCH_VERSION, "build_type": "mlstream",
                        "build_snapshot": False, "mlstream": __version__},
            "tagline": "ml-commons remote models, streamed"}


def publish_host(node: NodeIdentity, local_host: str | None) -> str:
    """The address clients should use: the bound one, or for a wildcard bind the address
    this client reached us on (OpenSearch publishes one of its interfaces)."""
    if node.host in ("", "0.0.0.0", "::") and local_host:
        return local_host
    return node.host


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def nodes_info(node: NodeIdentity, selector: str | None, metrics: str | None, local_host: str | None) -> dict:
    """``GET /_nodes[/{node_id}][/{metric}]``; ``selector`` may be node ids or metrics
    (OpenSearch's ``_nodes/{node_id_or_metric}``)."""
    if selector is not None and metrics is None and all(part in NODE_METRICS for part in selector.split(",")):
        selector, metrics = None, selector
    wanted = NODE_METRICS if metrics in (None, "_all") else tuple(metrics.split(","))
    unknown = [m for m in wanted if m not in NODE_METRICS]
    if unknown:
        raise BadRequest(f"request [/_nodes] contains unrecognized metric: [{unknown[0]}]")
    ours = selector is None or any(part in _THIS_NODE for part in selector.split(","))
    header = {"_nodes": {"total": int(ours), "successful": int(ours), "failed": 0}, "cluster_name": CLUSTER_NAME}
    if not ours:
        return {**header, "nodes": {}}
    host = publish_host(node, local_host)
    address = _address(host, node.port)
    info: dict[str, Any] = {"name": NODE_ID, "transport_address": address, "host": host, "ip": host,
                            "version": OPENSEARCH_VERSION, "build_type": "mlstream", "roles": ROLES,
                            "attributes": {}}
    if "http" in wanted:
        info["http"] = {"bound_address": [_address(node.host, node.port)], "publish_address": address,
                        "max_content_length_in_bytes": node.max_body_bytes}
    if "os" in wanted:
        info["os"] = {"name": platform.system(), "arch": platform.machine(),
                      "available_processors": os.cpu_count() or 1, "allocated_processors": os.cpu_count() or 1}
    if "process" in wanted:
        info["process"] = {"id": os.getpid()}
    if "plugins" in wanted:
        info["plugins"] = [{"name": ML_PLUGIN[0], "version": ML_PLUGIN[1],
                            "description": "ml-commons REST API for remote models (mlstream)"}]
    return {**header, "nodes": {NODE_ID: info}}


def cluster_health(problems: list[str]) -> dict[str, Any]:
    """One node, no shards: green while the server is ready, red (with why) when not."""
    body: dict[str, Any] = {
        "cluster_name": CLUSTER_NAME, "status": "red" if problems else "green", "timed_out": False,
        "number_of_nodes": 1, "number_of_data_nodes": 0, "discovered_master": True,
        "discovered_cluster_manager": True, "active_primary_shards": 0, "active_shards": 0,
        "relocating_shards": 0, "initializing_shards": 0, "unassigned_shards": 0, "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0, "number_of_in_flight_fetch": 0, "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0}
    if problems:
        body["mlstream_problems"] = problems
    return body


def cat_plugins(query: dict[str, str]) -> tuple[Any, str]:
    """``_cat/plugins`` as text (``v`` for headers, ``h`` for columns) or ``format=json``."""
    row = {"name": NODE_ID, "component": ML_PLUGIN[0], "version": ML_PLUGIN[1]}
    columns = [c.strip() for c in query.get("h", "name,component,version").split(",") if c.strip()]
    unknown = [c for c in columns if c not in row]
    if unknown:
        raise BadRequest(f"Unknown column [{unknown[0]}] for _cat/plugins")
    fmt = query.get("format", "text")
    if fmt == "json":
        return [{c: row[c] for c in columns}], "json"
    if fmt != "text":
        raise BadRequest(f"[format] must be text or json, got [{fmt}]")
    lines = [columns] if "v" in query and query["v"].lower() != "false" else []
    lines.append([row[c] for c in columns])
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "".join(" ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n"
                   for line in lines), "text"


def _action_stats(counts: PredictionCounts) -> dict[str, Any]:
    return {"predict": {"ml_action_request_count": counts.requests, "ml_action_failure_count": counts.failures}}


def ml_stats(node_selector: str | None, stat_names: str | None, *, counts: dict[str, int],
             all_predictions: PredictionCounts, per_model: dict[str, PredictionCounts], streams: dict[str, int]) -> dict:
    """``GET /_plugins/_ml[/{nodeId}]/stats[/{stat}]``, counted from what mlstream did."""
    wanted = [name.strip().lower() for name in (stat_names or "").split(",") if name.strip()]
    unknown = [n for n in wanted if n not in NODE_STATS + CLUSTER_STATS]
    if unknown:
        raise BadRequest(f"Wrong ML stat [{unknown[0]}]")
    cluster = {"ml_model_count": counts["models"], "ml_connector_count": counts["connectors"]}
    node = {"ml_request_count": all_predictions.requests, "ml_failure_count": all_predictions.failures,
            "ml_executing_task_count": streams["active"], "ml_deployed_model_count": counts["deployed"]}
    body: dict[str, Any] = {}
    for name in (wanted or CLUSTER_STATS):
        if name in cluster:
            body[name] = cluster[name]
    ours = node_selector is None or any(p in _THIS_NODE for p in node_selector.split(","))
    node_names = [n for n in wanted if n in node]
    if ours and (not wanted or node_names):
        stats: dict[str, Any] = {name: node[name] for name in (node_names or NODE_STATS)}
        if not wanted:
            if all_predictions.requests:
                stats["algorithms"] = {"remote": _action_stats(all_predictions)}
            if per_model:
                stats["models"] = {model_id: _action_stats(c) for model_id, c in per_model.items()}
            stats["mlstream_streams"] = streams
        body["nodes"] = {NODE_ID: stats}
    return body


def ml_profile(kind: str, ids: str | None, deployed: list[tuple[str, dict[str, Any]]],
               per_model: dict[str, PredictionCounts]) -> dict[str, Any]:
    """``GET /_plugins/_ml/profile[/models|/tasks][/{ids}]``: the deployed models and what
    their predictions took. mlstream tasks finish within their request, so none is running
    to profile."""
    if kind == "tasks":
        return {}
    chosen = None if ids is None else set(ids.split(","))
    models: dict[str, Any] = {}
    for model_id, doc in deployed:
        if chosen is not None and model_id not in chosen:
            continue
        profile: dict[str, Any] = {"model_state": doc.get("model_state"), "target_worker_nodes": [NODE_ID],
                                   "worker_nodes": [NODE_ID]}
        counts = per_model.get(model_id)
        if counts is not None and counts.requests:
            profile["predict_request_stats"] = {
                "count": counts.requests, "max": round(counts.max_ms, 3), "min": round(counts.min_ms, 3),
                "average": round(counts.total_ms / counts.requests, 3)}
        models[model_id] = profile
    return {"nodes": {NODE_ID: {"models": models}}} if models else {}


def local_host_of(connection: Any) -> str | None:
    """The address a client reached us on (only asked by the nodes-info routes)."""
    try:
        return connection.getsockname()[0] if connection is not None else None
    except OSError:
        return None
