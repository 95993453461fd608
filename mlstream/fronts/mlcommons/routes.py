"""The ml-commons REST endpoints, the OpenSearch node endpoints clients call (``GET /``,
nodes info, cluster health, ``_cat/plugins``), and health, readiness, metrics: each takes
a parsed ``Request`` and gives back a ``Reply``, or for ``_predict/stream`` a ``StreamReply``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ... import processing
from ...inference.batch import BatchJobs
from ...store.cluster import ClusterSettings
from ...access.policy import may_see_task, owner_of
from ...errors import BadRequest, NotFound
from ...metrics import Metrics
from ...inference.cache import CacheUse
from ...inference.predict import Ask, Bound, PredictResult, Predictor, check_one_api
from ...models.registry import AnyModel, Registry, RouterModel
from ...models.search import document_written
from ...server.routing import Reply, Request, Router, StreamReply
from . import node
from .errors import ML_COMMONS_FRONT
from .events import ML_COMMONS_EVENTS, RoutedEvents

PREFIX = "/_plugins/_ml"
STREAM_PARAMETER = "stream"


def build_router(registry: Registry, predictor: Predictor, cluster: ClusterSettings, metrics: Metrics,
                 readiness_problems: Callable[[], list[str]], identity: Callable[[], node.NodeIdentity],
                 render_metrics: Callable[[], str], *, batch: BatchJobs | None = None) -> Router:
    router = Router(ML_COMMONS_FRONT)

    def add(method: str, template: str, role: str = "admin"):
        def register(function):
            router.add(method, template, function, role)
            return function
        return register

    def add_search(kind: str, path: str, role: str = "admin") -> None:
        """``_search`` over one kind of record, by POST or GET (both carry the query as a body),
        over what the caller may reach (``access.policy``)."""
        def search(req: Request) -> Reply:
            visible = None
            if kind == "task":
                visible = lambda task_id, doc: may_see_task(req.caller, doc)  # noqa: E731
            return Reply(200, registry.search(kind, req.body, req.caller, visible))
        for method in ("POST", "GET"):
            router.add(method, f"{PREFIX}/{path}/_search", search, role)

    @add("GET", "/", role="user")
    def root(req: Request) -> Reply:
        return Reply(200, node.root(identity()))

    # the OpenSearch node: what sniffing, health checks and plugin checks ask
    for template in ("/_nodes", "/_nodes/{selector}", "/_nodes/{selector}/{metric}"):
        @add("GET", template, role="user")
        def nodes_info(req: Request) -> Reply:
            return Reply(200, node.nodes_info(identity(), req.params.get("selector"), req.params.get("metric"),
                                              node.local_host_of(req.connection)))

    @add("GET", "/_cluster/health", role="user")
    def cluster_health(req: Request) -> Reply:
        return Reply(200, node.cluster_health(readiness_problems()))

    @add("GET", "/_cat/plugins", role="user")
    def cat_plugins(req: Request) -> Reply:
        body, fmt = node.cat_plugins(req.query)
        if fmt == "json":
            return Reply(200, body)
        return Reply(200, body, content_type="text/plain; charset=UTF-8")

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
        return Reply(200, render_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")

    # connectors
    @add("POST", f"{PREFIX}/connectors/_create")
    def create_connector(req: Request) -> Reply:
        return Reply(200, {"connector_id": registry.create_connector(_required(req.body))})

    add_search("connector", "connectors")

    @add("GET", f"{PREFIX}/connectors/{{connector_id}}")
    def get_connector(req: Request) -> Reply:
        return Reply(200, registry.get_connector(req.params["connector_id"]))

    @add("PUT", f"{PREFIX}/connectors/{{connector_id}}")
    def update_connector(req: Request) -> Reply:
        registry.update_connector(req.params["connector_id"], _required(req.body))
        return Reply(200, document_written(".plugins-ml-connector", req.params["connector_id"], "updated"))

    @add("DELETE", f"{PREFIX}/connectors/{{connector_id}}")
    def delete_connector(req: Request) -> Reply:
        registry.delete_connector(req.params["connector_id"])
        return Reply(200, document_written(".plugins-ml-connector", req.params["connector_id"], "deleted"))

    # model groups
    @add("POST", f"{PREFIX}/model_groups/_register", role="tenant_admin")
    def register_model_group(req: Request) -> Reply:
        return Reply(200, registry.register_model_group(_required(req.body), req.caller))

    add_search("model_group", "model_groups", role="user")

    @add("GET", f"{PREFIX}/model_groups/{{model_group_id}}", role="user")
    def get_model_group(req: Request) -> Reply:
        return Reply(200, registry.get_model_group(req.params["model_group_id"], req.caller))

    @add("PUT", f"{PREFIX}/model_groups/{{model_group_id}}", role="tenant_admin")
    def update_model_group(req: Request) -> Reply:
        return Reply(200, registry.update_model_group(req.params["model_group_id"], _required(req.body),
                                                      req.caller))

    @add("DELETE", f"{PREFIX}/model_groups/{{model_group_id}}", role="tenant_admin")
    def delete_model_group(req: Request) -> Reply:
        registry.delete_model_group(req.params["model_group_id"], req.caller)
        return Reply(200, document_written(".plugins-ml-model-group", req.params["model_group_id"], "deleted"))

    # models
    @add("POST", f"{PREFIX}/models/_register")
    def register_model(req: Request) -> Reply:
        return Reply(200, registry.register_model(_required(req.body), deploy=req.flag("deploy"), caller=req.caller))

    add_search("model", "models", role="user")

    @add("GET", f"{PREFIX}/models/{{model_id}}", role="user")
    def get_model(req: Request) -> Reply:
        return Reply(200, registry.get_model(req.params["model_id"], req.caller))

    @add("PUT", f"{PREFIX}/models/{{model_id}}")
    def update_model(req: Request) -> Reply:
        # RestMLUpdateModelAction: an UpdateResponse
        registry.update_model(req.params["model_id"], req.body)
        return Reply(200, document_written(".plugins-ml-model", req.params["model_id"], "updated"))

    @add("DELETE", f"{PREFIX}/models/{{model_id}}")
    def delete_model(req: Request) -> Reply:
        registry.delete_model(req.params["model_id"])
        return Reply(200, document_written(".plugins-ml-model", req.params["model_id"], "deleted"))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_deploy")
    def deploy_model(req: Request) -> Reply:
        return Reply(200, registry.deploy_model(req.params["model_id"]))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_undeploy")
    def undeploy_model(req: Request) -> Reply:
        return Reply(200, registry.undeploy_model(req.params["model_id"]))

    @add("POST", f"{PREFIX}/models/_undeploy")
    def undeploy_models(req: Request) -> Reply:
        return Reply(200, registry.undeploy_models(_model_ids(req.body)))

    @add("POST", f"{PREFIX}/models/{{model_id}}/_predict", role="user")
    @add("POST", f"{PREFIX}/_predict/{{algorithm}}/{{model_id}}", role="user")
    def predict(req: Request) -> Reply:
        algorithm = req.params.get("algorithm") or req.query.get("algorithm")
        given = processing.parse_predict_input(_required(req.body), algorithm)
        model = resolve(req)
        cache = CacheUse(f"mlcommons/_predict/{algorithm or 'remote'}", req.body,
                         keep=_kept_result, load=_loaded_result)
        result = predictor.tensors(model, Ask(given.parameters, given.dataset), req.meter, cache)
        if req.access is not None:
            req.access.upstream_status = result.upstream_status
        # What the gateway added, next to what the provider took (ms).
        own = max(0.0, time.monotonic() - req.started - result.upstream_seconds)
        timing = f"upstream;dur={result.upstream_seconds * 1000:.1f}, mlstream;dur={own * 1000:.1f}"
        return Reply(200, result.body, {"Server-Timing": timing})

    @add("POST", f"{PREFIX}/models/{{model_id}}/_predict/stream", role="user")
    def predict_stream(req: Request) -> StreamReply:
        predictor.check_stream_enabled()
        given = processing.parse_predict_input(_required(req.body), "remote")
        model = resolve(req)
        # RestMLPredictionStreamAction puts "stream": "true" into the request's parameters
        # (so it wins), and a connector body may use ${parameters.stream}.
        parameters = {**given.parameters, STREAM_PARAMETER: "true"}
        check_one_api(model)
        events = RoutedEvents(req.meter) if isinstance(model, RouterModel) else ML_COMMONS_EVENTS
        cache = CacheUse("mlcommons/_predict/stream", req.body)
        return StreamReply(predictor.stream(model, lambda target: Bound(Ask(parameters)), req.meter, cache), events)

    # any key, on a model it may use; its task is its own (``may_see_task``)
    @add("POST", f"{PREFIX}/models/{{model_id}}/_batch_predict", role="user")
    def batch_predict(req: Request) -> Reply:
        if batch is None:
            raise BadRequest("batch predict is not served here")
        model = resolve(req)
        if isinstance(model, RouterModel):
            raise BadRequest(f"model [{model.model_id}] is a router: batch predict runs on a model with a connector")
        return Reply(200, batch.submit(model, _required(req.body), request_id=req.request_id,
                                       owner=owner_of(req.caller), meter=req.meter))

    def resolve(req: Request) -> AnyModel:
        """The URL's model, deployed on first use and checked against the caller (ml-commons'
        403); from here the call counts as its prediction."""
        model = registry.resolve(req.params["model_id"], req.caller)
        req.mark_model_resolved()
        return model

    def own_task(req: Request, missing: str = "Failed to find task") -> str:
        """The URL's task, when the caller may see it: another's is a 404, as a missing one."""
        task_id = req.params["task_id"]
        try:
            doc = registry.get_task(task_id)
        except NotFound:
            raise NotFound(missing) from None
        if not may_see_task(req.caller, doc):
            raise NotFound(missing)
        return task_id

    # tasks: any key, each sees its own (a tenant_admin its tenant's, an admin all)
    add_search("task", "tasks", role="user")

    @add("GET", f"{PREFIX}/tasks/{{task_id}}", role="user")
    def get_task(req: Request) -> Reply:
        task_id = own_task(req)
        return Reply(200, registry.get_task(task_id) if batch is None else batch.task(task_id))

    # _cancel_batch: the route's name in ml-commons 2.17 (and in OpenSearch's docs)
    for suffix in ("_cancel", "_cancel_batch"):
        @add("POST", f"{PREFIX}/tasks/{{task_id}}/{suffix}", role="user")
        def cancel_batch(req: Request) -> Reply:
            if batch is None:
                raise BadRequest("The task ID you provided does not have any associated batch job")
            return Reply(200, batch.cancel(own_task(req, "Fail to find task")))

    @add("DELETE", f"{PREFIX}/tasks/{{task_id}}", role="user")
    def delete_task(req: Request) -> Reply:
        registry.delete_task(own_task(req))
        return Reply(200, document_written(".plugins-ml-task", req.params["task_id"], "deleted"))

    # stats and profile: counted from what this server did since it started
    for template in ("/stats", "/stats/{stat}", "/{node_id}/stats", "/{node_id}/stats/{stat}"):
        @add("GET", PREFIX + template, role="user")
        def ml_stats(req: Request) -> Reply:
            everything, per_model = metrics.predictions()
            return Reply(200, node.ml_stats(req.params.get("node_id"), req.params.get("stat"),
                                            counts=registry.counts(), all_predictions=everything,
                                            per_model=per_model, streams=metrics.streams()))

    for template in ("/profile", "/profile/{kind}", "/profile/{kind}/{ids}"):
        @add("GET", PREFIX + template, role="user")
        def ml_profile(req: Request) -> Reply:
            kind = req.params.get("kind", "models")
            if kind not in ("models", "tasks"):
                raise BadRequest(f"unknown profile [{kind}]: models or tasks")
            return Reply(200, node.ml_profile(kind, req.params.get("ids"), registry.deployed_models(),
                                              metrics.predictions()[1]))

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


def _model_ids(body: Any) -> list[str] | None:
    """``{"model_ids": [...]}`` (and ``node_ids``, which on one node can only name it); no
    model ids means every deployed model, as ml-commons undeploys them all."""
    if body is None:
        return None
    if not isinstance(body, dict) or set(body) - {"model_ids", "node_ids"}:
        raise BadRequest("the body takes [model_ids] and [node_ids]")
    ids = body.get("model_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest("[model_ids] must be a list of model ids")
    return ids


# ``_predict``'s answer in the response cache, and back: an answer from the cache took no
# provider time (its Server-Timing says upstream 0).
def _kept_result(result: PredictResult) -> dict[str, Any]:
    return {"body": result.body, "status": result.upstream_status}


def _loaded_result(stored: dict[str, Any]) -> PredictResult:
    return PredictResult(stored["body"], int(stored["status"]), 0.0)
