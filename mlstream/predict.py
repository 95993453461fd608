"""Predict and predict-stream: from a request body to an upstream call.

Both paths resolve the model (auto-deploying it), merge the parameters, render
the action and check the endpoint before anything is sent upstream, so a bad
request costs the provider nothing.

``_predict`` also takes ml-commons' dataset inputs (``text_docs``; ``query_text``
with ``text_docs``), runs the connector's pre- and post-process functions, built-in
or Painless (``processing``), and, like ml-commons' ``RemoteConnectorExecutor``, may split
``text_docs`` into several upstream requests: they run at once, at most the
connector's ``max_connection`` of them, and their results come back in input order,
one ``inference_results`` entry per request. One failed request fails the call.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

from . import processing
from .cluster import ClusterSettings
from .connectors import Connector, UpstreamRequest, merge_parameters, render_request
from .errors import BadRequest, MLStreamError, ShuttingDown, UpstreamError
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
# Upstream requests one predict call may make in all: text_docs split one request per
# document (bedrock.embedding) or per input_docs_processed_step_size documents, so at
# most this many documents (times the step size) per call. Past it the call is refused
# before anything is rendered or sent (a 10 MB body of empty strings would be millions).
MAX_UPSTREAM_REQUESTS_PER_CALL = 1024


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

    def predict(self, model_id: str, body: Any, request_id: str = "", algorithm: str | None = None, *,
                resolved: Callable[[], None] = lambda: None) -> PredictResult:
        """The model's answer in ml-commons' ``inference_results`` shape: built-in
        post-process functions give tensors, otherwise the provider's JSON as ``response``.

        ``algorithm`` (``remote``, ``text_embedding``, ``text_similarity``) is what the
        caller named in the URL; None lets the body's fields decide. ``resolved`` is
        called once the model was found.
        """
        model, prepared = self._prepare_predict(model_id, body, request_id, algorithm, resolved)
        try:
            answers = self._run(prepared, model.connector)
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise
        upstream_seconds = max(a.done for a in answers) - min(a.sent for a in answers)
        return PredictResult({"inference_results": [a.entry for a in answers]},
                             answers[-1].status, upstream_seconds)

    def _prepare_predict(self, model_id: str, body: Any, request_id: str, algorithm: str | None,
                         resolved: Callable[[], None]) -> tuple[ResolvedModel, list[Prepared]]:
        given = processing.parse_predict_input(body, algorithm)
        model = self._registry.resolve(model_id)
        resolved()
        connector = model.connector
        action = connector.action("predict")
        request_parameters = processing.escape_input_parameters(given.parameters)
        dataset = given.dataset
        size = (processing.chunk_size(action.pre_process_function, connector.parameters, len(dataset.docs))
                if isinstance(dataset, processing.TextDocs) else 1)
        if isinstance(dataset, processing.TextDocs):
            requests = -(-len(dataset.docs) // size)
            if requests > MAX_UPSTREAM_REQUESTS_PER_CALL:
                raise BadRequest(
                    f"[text_docs] has {len(dataset.docs)} documents, which this model sends as {requests} requests "
                    f"({size} documents each); one predict call makes at most {MAX_UPSTREAM_REQUESTS_PER_CALL} "
                    f"requests ({MAX_UPSTREAM_REQUESTS_PER_CALL * size} documents): split the input")
        prepared = []
        for chunk in processing.split_dataset(dataset, size):
            merged = _pre_processed(connector, chunk, request_parameters)
            processing.check_response_filter(merged.get(RESPONSE_FILTER))
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

        try:
            futures: list[Future] = [self._fanout.submit(lane, k) for k in range(1, lanes)]
        except RuntimeError:  # the fan-out pool was shut down
            raise _shutting_down() from None
        errors: list[BaseException] = []
        try:
            lane(0)
        except MLStreamError as error:
            errors.append(error)
        for future in futures:
            try:
                error = future.exception()
            except CancelledError:  # shutdown cancelled a lane that had not started
                error = _shutting_down()
            if error is not None:
                errors.append(error)
        if errors:
            raise errors[0]
        return [answer for answer in answers if answer is not None]

    def _answer(self, prepared: Prepared) -> _Answer:
        sent = time.monotonic()
        status, payload = self._exchange(prepared)
        done = time.monotonic()
        output = _output(prepared.model.connector.action("predict").post_process_function,
                         payload, prepared.parameters)
        return _Answer({"output": output, "status_code": status}, status, sent, done)

    def _exchange(self, prepared: Prepared) -> tuple[int, bytes]:
        """One non-stream upstream call: the provider's 2xx status and body, or its error raised."""
        call = self._call(prepared.request, prepared.model.connector)
        response = call.open(_wait_uninterrupted)
        payload = call.read_body(response)
        if response.status >= 300:
            raise call.error(response, payload)
        return response.status, payload

    # --- other fronts (the OpenAI API): their own body, the same path upstream -------

    def prepare_request(self, model: ResolvedModel, parameters: dict[str, Any],
                        reshape: Callable[[dict[str, Any]], dict[str, Any]], request_id: str = "") -> Prepared:
        """The model's predict action rendered with ``parameters`` over the connector's, then
        its JSON body replaced by ``reshape(body)``: the URL, headers and credentials stay the
        connector's. Checked and rate-limited as a predict call."""
        merged = merge_parameters(model.connector, processing.escape_input_parameters(parameters))
        prepared = self._checked(model, merged, request_id)
        rendered = _json_object(prepared.request.body)
        body = json.dumps(reshape(rendered), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._rate_limiter.acquire(model.model_id, model.rate_limit)
        return Prepared(model, merged, replace(prepared.request, body=body))

    def exchange(self, prepared: Prepared) -> bytes:
        """A prepared request's non-stream answer: the provider's body."""
        try:
            return self._exchange(prepared)[1]
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise

    def open_prepared_stream(self, prepared: Prepared, *, relay: bool, chat: bool = False) -> "PendingStream":
        """``open_stream`` for a prepared request; ``relay``: the provider's own chunks
        (``Chunk``, an OpenAI-interface model) rather than its text (``Delta``); ``chat``:
        the request is a SageMaker container's chat schema, and so is its stream."""
        if not self._cluster.stream_enabled:
            raise BadRequest("Streaming is disabled: set plugins.ml_commons.stream_enabled to true")
        return self._pending_stream(prepared, relay=relay, chat=chat)

    def open_stream(self, model_id: str, body: Any, request_id: str = "", *,
                    resolved: Callable[[], None] = lambda: None) -> "PendingStream":
        """Prepare relaying the model's answer: its channel, and the call that starts it.

        Raises before anything is started for bad input or a disabled stream setting;
        ``start()`` raises Overloaded when the pool is full.
        """
        if not self._cluster.stream_enabled:
            raise BadRequest("Streaming is disabled: set plugins.ml_commons.stream_enabled to true")
        return self._pending_stream(self._prepare(model_id, body, request_id, resolved), relay=False)

    def _pending_stream(self, prepared: Prepared, *, relay: bool, chat: bool = False) -> "PendingStream":
        connector = prepared.model.connector
        dialect = dialect_for(prepared.parameters, connector)
        call = self._call(dialect.stream_request(prepared.request, connector, prepared.parameters), connector)
        decoder = (dialect.new_relay_decoder() if relay else dialect.new_chat_decoder() if chat
                   else dialect.new_decoder())
        channel = Channel(self._server.stream_queue_chunks)
        return PendingStream(channel, partial(start_stream, self._pool, channel, call, decoder,
                                              self._server.client_stall_timeout))

    def _call(self, request: UpstreamRequest, connector: Connector) -> ProviderCall:
        return ProviderCall(self._upstream, request, connector,
                            allow_private=self._cluster.endpoint_policy.allow_private,
                            on_retry=self._metrics.upstream_retry)

    def _prepare(self, model_id: str, body: Any, request_id: str, resolved: Callable[[], None]) -> Prepared:
        given = processing.parse_predict_input(body, "remote")
        model = self._registry.resolve(model_id)
        resolved()
        merged = _pre_processed(model.connector, None, processing.escape_input_parameters(given.parameters))
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


def _pre_processed(connector: Connector, chunk: processing.Dataset | None,
                   request_parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters one upstream request is rendered with: the pre-process function's
    output (escaped) merged in ml-commons' order, the connector's, the request's, the
    function's, and the request's again (RemoteConnectorExecutor: "always prioritize the
    input parameter"), so a function adds parameters but never replaces the request's."""
    parameters = merge_parameters(connector, request_parameters)
    processed = processing.escape_input_parameters(processing.pre_process(
        connector.action("predict").pre_process_function, chunk, parameters, request_parameters))
    if not processed:   # a plain call: nothing to add
        return parameters
    return {**connector.parameters, **processed, **request_parameters}


def _shutting_down() -> ShuttingDown:
    return ShuttingDown("the server is shutting down: this call's upstream requests were cancelled")


def _wait_uninterrupted(seconds: float) -> bool:
    """The non-stream backoff: the handler thread has nothing else to watch."""
    time.sleep(seconds)
    return True


def _output(post_process_function: str | None, payload: bytes, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """One upstream answer as ml-commons' output tensors (ConnectorUtils.processOutput)."""
    response_filter = parameters.get(RESPONSE_FILTER)
    if post_process_function is not None and processing.is_script(post_process_function):
        tensors = processing.post_process_script(post_process_function, parameters, payload)
        if tensors is not None:
            return tensors
        post_process_function = None   # the script returned null: the answer as it is
    if post_process_function is None:
        return [{"name": "response", "dataAsMap": _filtered(payload, response_filter)}]
    try:
        answer = loads_json(payload)
    except ValueError:
        raise UpstreamError("post_process_function cannot read the model's answer: it is not JSON",
                            kind="answer") from None
    return processing.post_process(post_process_function, answer, response_filter)


def _json_object(body: bytes | None) -> dict[str, Any]:
    if not body:
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        raise BadRequest("the connector's request_body does not render to JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("the connector's request_body does not render to a JSON object")
    return value


def _filtered(payload: bytes, response_filter: Any) -> Any:
    try:
        data = loads_json(payload)
    except ValueError:
        return {"response": payload.decode("utf-8", errors="replace")}
    if response_filter is None or not response_filter.strip():  # (its type checked before the call)
        return data if isinstance(data, dict) else {"response": data}
    try:
        value = compile_path(response_filter).read(data)
    except PathNotFound:
        raise BadRequest(f"[{RESPONSE_FILTER}] {response_filter} matches nothing in the provider's "
                         "answer") from None
    return value if isinstance(value, dict) else {"response": value}
