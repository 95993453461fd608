"""Predict and predict-stream: from a request body to an upstream call.

Both paths resolve the model (auto-deploying it), merge the parameters, render
the action and check the endpoint before anything is sent upstream, so a bad
request costs the provider nothing.

``_predict`` also takes ml-commons' dataset inputs (``text_docs``; ``query_text``
with ``text_docs``), runs the connector's built-in pre- and post-process functions
(``processing``) and, like ml-commons' ``RemoteConnectorExecutor``, may split
``text_docs`` into several upstream requests: they run at once, at most the
connector's ``max_connection`` of them, and their results come back in input order,
one ``inference_results`` entry per request. One failed request fails the call.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from . import processing
from .cluster import ClusterSettings
from .connectors import Connector, UpstreamRequest, merge_parameters, render_request
from .errors import BadRequest, MLStreamError, UpstreamError
from .jsonpath import PathNotFound, compile_path
from .metrics import Metrics
from .providers import dialect_for
from .ratelimit import RateLimiter
from .registry import Registry, ResolvedModel
from .settings import ServerSettings
from .speedups import loads_json
from .streaming.channel import Channel
from .streaming.pool import StreamPool
from .streaming.reader import start_stream
from .upstream import ProviderCall, UpstreamClient

RESPONSE_FILTER = "response_filter"
# Upstream requests one predict call keeps in flight at most (also bounded by the
# connector's max_connection and the fan-out pool).
MAX_FANOUT = 16


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


@dataclass(frozen=True, slots=True)
class _Answer:
    """One upstream request's outcome, as one ``inference_results`` entry."""

    entry: dict[str, Any]
    status: int
    sent: float       # time.monotonic() at sending, and at the answer's last byte
    done: float


class Predictor:
    def __init__(self, registry: Registry, cluster: ClusterSettings, upstream: UpstreamClient,
                 pool: StreamPool, metrics: Metrics, server: ServerSettings,
                 rate_limiter: RateLimiter | None = None) -> None:
        self._registry = registry
        self._cluster = cluster
        self._upstream = upstream
        self._pool = pool
        self._metrics = metrics
        self._server = server
        self._rate_limiter = rate_limiter or RateLimiter()
        # Runs the extra upstream requests of a predict call split into several (the
        # handler's own thread runs one share); threads start only when first needed.
        self._fanout = ThreadPoolExecutor(max_workers=server.stream_workers,
                                          thread_name_prefix="predict-fanout")

    def close(self) -> None:
        self._fanout.shutdown(wait=False, cancel_futures=True)

    def predict(self, model_id: str, body: Any, request_id: str = "",
                algorithm: str | None = None) -> PredictResult:
        """The model's answer in ml-commons' ``inference_results`` shape: built-in
        post-process functions give tensors, otherwise the provider's JSON as ``response``.

        ``algorithm`` (``remote``, ``text_embedding``, ``text_similarity``) is what the
        caller named in the URL; None lets the body's fields decide.
        """
        model, prepared = self._prepare_predict(model_id, body, request_id, algorithm)
        try:
            answers = self._run(prepared, model.connector)
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise
        upstream_seconds = max(a.done for a in answers) - min(a.sent for a in answers)
        return PredictResult({"inference_results": [a.entry for a in answers]},
                             answers[-1].status, upstream_seconds)

    def _prepare_predict(self, model_id: str, body: Any, request_id: str,
                         algorithm: str | None) -> tuple[ResolvedModel, list[Prepared]]:
        given = processing.parse_predict_input(body, algorithm)
        model = self._registry.resolve(model_id)
        connector = model.connector
        action = connector.action("predict")
        request_parameters = processing.escape_input_parameters(given.parameters)
        dataset = given.dataset
        size = (processing.chunk_size(action.pre_process_function, connector.parameters, len(dataset.docs))
                if isinstance(dataset, processing.TextDocs) else 1)
        prepared = []
        for chunk in processing.split_dataset(dataset, size):
            processed = processing.escape_input_parameters(
                processing.pre_process(action.pre_process_function, chunk))
            # ml-commons' order: the connector's, the request's, the function's, and the
            # request's again (RemoteConnectorExecutor: "always prioritize the input parameter").
            merged = {**connector.parameters, **processed, **request_parameters}
            prepared.append(self._checked(model, merged, request_id))
        self._rate_limiter.acquire(model.model_id, model.rate_limit)
        return model, prepared

    def _run(self, prepared: list[Prepared], connector: Connector) -> list[_Answer]:
        if len(prepared) == 1:
            return [self._answer(prepared[0])]
        lanes = min(len(prepared), connector.client_config.max_connection, MAX_FANOUT)
        answers: list[_Answer | None] = [None] * len(prepared)
        failed = threading.Event()

        def lane(first: int) -> None:
            # Lane k runs requests k, k + lanes, ...: input order is kept by index.
            for index in range(first, len(prepared), lanes):
                if failed.is_set():
                    return
                try:
                    answers[index] = self._answer(prepared[index])
                except BaseException:
                    failed.set()
                    raise

        futures: list[Future] = [self._fanout.submit(lane, k) for k in range(1, lanes)]
        errors: list[BaseException] = []
        try:
            lane(0)
        except MLStreamError as error:
            errors.append(error)
        for future in futures:
            error = future.exception()
            if error is not None:
                errors.append(error)
        if errors:
            raise errors[0]
        return [answer for answer in answers if answer is not None]

    def _answer(self, prepared: Prepared) -> _Answer:
        call = self._call(prepared.request, prepared.model.connector, stream=False)
        sent = time.monotonic()
        response = call.open(_wait_uninterrupted)
        payload = call.read_body(response)
        done = time.monotonic()
        if response.status >= 300:
            raise call.error(response, payload)
        output = _output(prepared.model.connector.action("predict").post_process_function,
                         payload, prepared.parameters.get(RESPONSE_FILTER))
        return _Answer({"output": output, "status_code": response.status}, response.status, sent, done)

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
        given = processing.parse_predict_input(body, "remote")
        model = self._registry.resolve(model_id)
        merged = merge_parameters(model.connector, processing.escape_input_parameters(given.parameters))
        prepared = self._checked(model, merged, request_id)
        self._rate_limiter.acquire(model.model_id, model.rate_limit)
        return prepared

    def _checked(self, model: ResolvedModel, merged: dict[str, Any], request_id: str) -> Prepared:
        """The rendered request, its endpoint checked."""
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


def _output(post_process_function: str | None, payload: bytes, response_filter: Any) -> list[dict[str, Any]]:
    """One upstream answer as ml-commons' output tensors (ConnectorUtils.processOutput)."""
    if post_process_function is None:
        return [{"name": "response", "dataAsMap": _filtered(payload, response_filter)}]
    try:
        answer = loads_json(payload)
    except ValueError:
        raise UpstreamError("post_process_function cannot read the model's answer: it is not JSON",
                            kind="answer") from None
    return processing.post_process(post_process_function, answer, response_filter)


def _filtered(payload: bytes, response_filter: Any) -> Any:
    try:
        data = loads_json(payload)
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
