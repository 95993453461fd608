"""The ml-commons REST endpoints (and health, readiness, metrics): each takes a parsed
``Request`` and gives back a ``Reply``, or for ``_predict/stream`` a ``StreamReply``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .. import __version__
from ..cluster import ClusterSettings
from ..errors import BadRequest
from ..metrics import Metrics
from ..predict import Predictor
from ..registry import Registry
from .routing import Reply, Request, Router, StreamReply

PREFIX = "/_plugins/_ml"


def build_router(registry: Registry, predictor: Predictor, cluster: ClusterSettings, metrics: Metrics,
                 readiness_problems: Callable[[], list[str]]) -> Router:
    router = Router()

    def add(method: str, template: str, role: str = "admin"):
        def register(function):
            router.add(method, template, function, role)
            return function
        return register

    @add("GET", "/", role="user")
    def root(req: Request) -> Reply:
        return Reply(200, {"name": "mlstream", "version": {"number": __version__},
                           "tagline": "ml-commons remote models, streamed"})

    @add("GET", "/healthz", role="public")
    def healthz(req: Request) -> Reply:
        return Reply(200, {"status": "ok"})

    @add("GET", "/readyz", role="public")
    def readyz(req: Request) -> Reply:
        problems = readiness_problems()
        if problems:
            return Reply(503, {"status": "unavailable", "problems": problems})
        return Reply(200, {"status": "ready"})

    @add("GET", "/metrics", role="user")
    def metrics_text(req: Request) -> Reply:
        return Reply(200, metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")

    # connectors
    @add("POST", f"{PREFIX}/connectors/_create")
    def create_connector(req: Request) -> Reply:
        return Reply(200, {"connector_id": registry.create_connector(_required(req.body))})

    for method in ("POST", "GET"):
        @add(method, f"{PREFIX}/connectors/_search")
        def search_connectors(req: Request) -> Reply:
            return Reply(200, registry.search("connector", req.body))

    @add("GET", f"{PREFIX}/connectors/{{connector_id}}")
    def get_connector(req: Request) -> Reply:
        return Reply(200, registry.get_connector(req.params["connector_id"]))

    @add("PUT", f"{PREFIX}/connectors/{{connector_id}}")
    def update_connector(req: Request) -> Reply:
        registry.update_connector(req.params["connector_id"], _required(req.body))
        return Reply(200, _result(req.params["connector_id"], ".plugins-ml-connector", "updated"))

    @add("DELETE", f"{PREFIX}/connectors/{{connector_id}}")
    def delete_connector(req: Request) -> Reply:
        registry.delete_connector(req.params["connector_id"])
        return Reply(200, _result(req.params["connector_id"], ".plugins-ml-connector", "deleted"))

    # models
    @add("POST", f"{PREFIX}/models/_register")
    def register_model(req: Request) -> Reply:
        return Reply(200, registry.register_model(_required(req.body), deploy=req.flag("deploy")))

    for method in ("POST", "GET"):
        @add(method, f"{PREFIX}/models/_search", role="user")
        def search_models(req: Request) -> Reply:
            return Reply(200, registry.search("model", req.body))

    @add("GET", f"{PREFIX}/models/{{model_id}}", role="user")
    def get_model(req: Request) -> Reply:
        return Reply(200, registry.get_model(req.params["model_id"]))

    @add("DELETE", f"{PREFIX}/models/{{model_id}}")
    def delete_model(req: Request) -> Reply:
        registry.delete_model(req.params["model_id"])
        return Reply(200, _result(req.params["model_id"], ".plugins-ml-model", "deleted"))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_deploy")
    def deploy_model(req: Request) -> Reply:
        return Reply(200, registry.deploy_model(req.params["model_id"]))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_undeploy")
    def undeploy_model(req: Request) -> Reply:
        return Reply(200, registry.undeploy_model(req.params["model_id"]))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_predict", role="user")
    @add("POST", f"{PREFIX}/_predict/{{algorithm}}/{{model_id}}", role="user")
    def predict(req: Request) -> Reply:
        algorithm = req.params.get("algorithm") or req.query.get("algorithm")
        result = predictor.predict(req.params["model_id"], _required(req.body), req.request_id,
                                   algorithm)
        if req.access is not None:
            req.access.upstream_status = result.upstream_status
        # What the gateway added, next to what the provider took (ms).
        own = max(0.0, time.monotonic() - req.started - result.upstream_seconds)
        timing = f"upstream;dur={result.upstream_seconds * 1000:.1f}, mlstream;dur={own * 1000:.1f}"
        return Reply(200, result.body, {"Server-Timing": timing})

    @add("POST", f"{PREFIX}/models/{{model_id}}/_predict/stream", role="user")
    def predict_stream(req: Request) -> StreamReply:
        return StreamReply(predictor.open_stream(req.params["model_id"], _required(req.body), req.request_id))

    # tasks
    @add("GET", f"{PREFIX}/tasks/{{task_id}}")
    def get_task(req: Request) -> Reply:
        return Reply(200, registry.get_task(req.params["task_id"]))

    # cluster settings
    @add("GET", "/_cluster/settings")
    def get_settings(req: Request) -> Reply:
        return Reply(200, cluster.to_body(include_defaults=req.flag("include_defaults"),
                                          flat=req.flag("flat_settings")))

    @add("PUT", "/_cluster/settings")
    def put_settings(req: Request) -> Reply:
        return Reply(200, cluster.update(_required(req.body)))

    return router


def _required(body: Any) -> Any:
    if body is None:
        raise BadRequest("request body is required")
    return body


def _result(doc_id: str, index: str, result: str) -> dict[str, Any]:
    """OpenSearch's document write response (what ml-commons returns for update/delete)."""
    return {"_index": index, "_id": doc_id, "_version": 1, "result": result,
            "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1}
