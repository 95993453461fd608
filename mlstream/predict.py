"""Predict and predict-stream: from a request body to an upstream call.

Both paths share ``_prepare``: resolve the model (auto-deploying it), merge the
parameters, render the action, check the endpoint. Nothing is sent upstream
until all of that has passed, so a bad request costs the provider nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from .cluster import ClusterSettings
from .connectors import Connector, UpstreamRequest, merge_parameters, render_request
from .errors import BadRequest, UpstreamError
from .jsonpath import PathNotFound, compile_path
from .metrics import Metrics
from .providers import dialect_for
from .ratelimit import RateLimiter
from .registry import Registry, ResolvedModel
from .settings import ServerSettings
from .streaming.channel import Channel
from .streaming.pool import StreamPool
from .streaming.reader import start_stream
from .upstream import ProviderCall, UpstreamClient

RESPONSE_FILTER = "response_filter"


@dataclass(frozen=True, slots=True)
class PredictResult:
    body: dict[str, Any]
    upstream_status: int
    upstream_seconds: float  # from sending the request to the last byte of the answer


@dataclass(frozen=True, slots=True)
class PendingStream:
    """A stream ready to start. Its writer registers the channel (for hang-ups and
    shutdown) before ``start`` (``reader.start_stream``), which may open the provider
    call on the writer's own thread and raises Overloaded when the pool is full."""

    channel: Channel
    start: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Prepared:
    model: ResolvedModel
    parameters: dict[str, Any]
    request: UpstreamRequest


class Predictor:
    def __init__(self, registry: Registry, cluster: ClusterSettings, upstream: UpstreamClient,
                 pool: StreamPool, metrics: Metrics, server: ServerSettings) -> None:
        self._registry = registry
        self._cluster = cluster
        self._upstream = upstream
        self._pool = pool
        self._metrics = metrics
        self._server = server
        self._rate_limiter = RateLimiter()

    def predict(self, model_id: str, body: Any, request_id: str = "") -> PredictResult:
        """The whole upstream answer in ml-commons' ``inference_results`` shape."""
        prepared = self._prepare(model_id, body, request_id)
        try:
            return self._predict(prepared)
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise

    def _predict(self, prepared: Prepared) -> PredictResult:
        call = self._call(prepared.request, prepared.model.connector, stream=False)
        sent = time.monotonic()
        response = call.open(_wait_uninterrupted)
        payload = call.read_body(response)
        upstream_seconds = time.monotonic() - sent
        if response.status >= 300:
            raise call.error(response, payload)
        return PredictResult({"inference_results": [{
            "output": [{"name": "response",
                        "dataAsMap": _filtered(payload, prepared.parameters.get(RESPONSE_FILTER))}],
            "status_code": response.status}]}, response.status, upstream_seconds)

    def open_stream(self, model_id: str, body: Any, request_id: str = "") -> "PendingStream":
        """Prepare relaying the model's answer: its channel, and the call that starts it.

        Raises before anything is started for bad input or a disabled stream setting;
        ``start()`` raises Overloaded when the pool is full.
        """
        if not self._cluster.stream_enabled:
            raise BadRequest("Streaming is disabled: set plugins.ml_commons.stream_enabled to true")
        prepared = self._prepare(model_id, body, request_id)
        connector = prepared.model.connector
        dialect = dialect_for(prepared.parameters, connector)
        call = self._call(dialect.stream_request(prepared.request, connector, prepared.parameters),
                          connector, stream=True)
        channel = Channel(self._server.stream_queue_chunks)
        return PendingStream(channel, partial(start_stream, self._pool, channel, call, dialect.new_decoder(),
                                              self._server.client_stall_timeout))

    def _call(self, request: UpstreamRequest, connector: Connector, *, stream: bool) -> ProviderCall:
        return ProviderCall(self._upstream, request, connector, stream=stream,
                            allow_private=self._cluster.endpoint_policy.allow_private,
                            on_retry=self._metrics.upstream_retry)

    def _prepare(self, model_id: str, body: Any, request_id: str) -> Prepared:
        parameters = _request_parameters(body)
        model = self._registry.resolve(model_id)
        self._rate_limiter.acquire(model.model_id, model.rate_limit)
        merged = merge_parameters(model.connector, parameters)
        request = render_request(model.connector, merged)
        if request_id and not any(name.lower() == "x-request-id" for name in request.headers):
            request.headers["X-Request-Id"] = request_id  # lets the provider's logs be matched
        policy = self._cluster.endpoint_policy
        policy.check_literal_host(policy.check_url(request.url))
        return Prepared(model, merged, request)


def _wait_uninterrupted(seconds: float) -> bool:
    """The non-stream backoff: the handler thread has nothing else to watch."""
    time.sleep(seconds)
    return True


def _request_parameters(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object with [parameters]")
    unknown = sorted(set(body) - {"parameters"})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}]: a remote model takes [parameters]")
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest("[parameters] must be a JSON object")
    return parameters


def _filtered(payload: bytes, response_filter: Any) -> Any:
    try:
        data = json.loads(payload)
    except ValueError:
        return {"response": payload.decode("utf-8", errors="replace")}
    if response_filter is None:
        return data if isinstance(data, dict) else {"response": data}
    if not isinstance(response_filter, str):
        raise BadRequest(f"[{RESPONSE_FILTER}] must be a JSONPath string")
    try:
        value = compile_path(response_filter).read(data)
    except PathNotFound:
        raise BadRequest(f"[{RESPONSE_FILTER}] {response_filter} matches nothing in the provider's "
                         "answer") from None
    return value if isinstance(value, dict) else {"response": value}
