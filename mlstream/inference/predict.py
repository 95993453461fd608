"""From what a front asks of a model to the provider's answer: one pipeline for every front.

    front: its body -> Ask (parameters, dataset, or its own request fields)
    Predictor.prepare(model, ask)   parameters merged (pre-process function, or the
                                    front's fields set on the rendered body), the action
                                    rendered, the endpoint checked, the dialect chosen
                                    once, the model's rate limit taken -> Prepared
    Predictor.predict / exchange / open_stream(Prepared)    the provider is called

Nothing is sent before ``prepare`` returns, so a bad request costs the provider nothing;
a ``Prepared`` is the one place a call's model, interface and requests are known.

``_predict`` also takes ml-commons' dataset inputs (``text_docs``; ``query_text``
with ``text_docs``), runs the connector's pre- and post-process functions, built-in
or Painless (``processing``), and, like ml-commons' ``RemoteConnectorExecutor``, may split
``text_docs`` into several upstream requests: they run at once, at most the
connector's ``max_connection`` of them, and their results come back in input order,
one ``inference_results`` entry per request. One failed request fails the call.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Mapping

from .. import processing
from ..models import interfaces
from ..store.cluster import ClusterSettings
from ..models.connectors import Action, Connector, UpstreamRequest, merge_parameters, render_request
from ..access.keys import Caller
from ..access.budgets import Accountant
from ..errors import AccessDenied, BadRequest, Forbidden, MLStreamError, NotFound, ShuttingDown, UpstreamError
from ..guard.guardrails import Checks, Guardrails, check_input, check_output
from ..wire.jsonpath import PathNotFound, compile_path
from ..metrics import Metrics
from ..providers import Dialect, StreamKind, dialect_for, known_dialect
from ..usage.limits import RateLimiter
from ..models.registry import AnyModel, ResolvedModel, RouterModel
from ..models.routing import RouterHealth, Routing, candidates, retry_class
from ..settings.server import ServerSettings
from ..speedups import loads_json
from ..streaming.channel import Channel
from ..streaming.pool import StreamPool
from ..providers.base import StreamDecoder
from ..streaming.reader import start_stream
from ..streaming.watcher import Watcher
from ..telemetry.hooks import RequestTrace, Telemetry
from ..usage.tokens import DEFAULT_OUTPUT_ESTIMATE, TokenCounts, answer_tokens, output_cap
from ..usage.records import cost_of
from ..upstream.client import ProviderCall, UpstreamClient
from ..caching import Entry
from .cache import CacheState, CacheUse, Plan, Recording, RecordingChannel, ResponseCache, stream_entry
from .calls import (ESTIMATED_BYTES_PER_TOKEN, ActionAnswer, Ask, Bind, Bound, CallMeter, PendingStream, Prepared,
                    PredictResult, UpstreamCall)

log = logging.getLogger(__name__)

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
class _Answer:
    """One upstream request's outcome, as one ``inference_results`` entry."""

    entry: dict[str, Any]
    status: int
    sent: float       # time.monotonic() at sending, and at the answer's last byte
    done: float
    tokens: TokenCounts | None


class Predictor:
    """From a front's ``Ask`` to the provider: ``prepare`` once, then ``predict`` (ml-commons'
    tensors), ``exchange`` (the provider's own answer) or ``open_stream``."""

    def __init__(self, cluster: ClusterSettings, upstream: UpstreamClient, pool: StreamPool, metrics: Metrics,
                 server: ServerSettings, rate_limiter: RateLimiter | None = None,
                 accountant: Accountant | None = None,
                 guardrail_checks: Checks | None = None,
                 resolve: Callable[[str, Caller | None], AnyModel] | None = None,
                 router_health: RouterHealth | None = None, telemetry: Telemetry | None = None,
                 watcher: Watcher | None = None, cache: ResponseCache | None = None) -> None:
        self._cluster = cluster
        self._upstream = upstream
        self._pool = pool
        self._watcher = watcher  # the readiness loop streams wait on (None: a worker waits on each)
        self._metrics = metrics
        self._server = server
        self._rate_limiter = rate_limiter or RateLimiter()
        self._accountant = accountant  # keys' budgets and limits, usage records; None: not kept
        self._guardrail_checks = guardrail_checks  # what a model's guardrails read and ask
        self._resolve = resolve  # a router's targets, by id (the registry's); None: no routers
        self._health = router_health or RouterHealth()
        self._telemetry = telemetry  # a span per provider call; None: tracing is off
        self._cache = cache  # the response cache; None: never cached
        # Runs the extra upstream requests of a predict call split into several (the
        # handler's own thread runs one share); threads start only when first needed.
        self._fanout = ThreadPoolExecutor(max_workers=server.stream_workers,
                                          thread_name_prefix="predict-fanout")

    def close(self) -> None:
        self._fanout.shutdown(wait=False, cancel_futures=True)

    def check_stream_enabled(self) -> None:
        if not self._cluster.stream_enabled:
            raise BadRequest("Streaming is disabled: set plugins.ml_commons.stream_enabled to true")

    def prepare(self, model: ResolvedModel, ask: Ask, meter: CallMeter, *, stream: bool = False,
                dialect: Dialect | None = None, cache: CacheUse | None = None) -> Prepared:
        """The call rendered and checked, the dialect chosen, the model's rate limit and the
        key's admission taken: a bad request costs the provider nothing. ``meter`` is the
        request's (``Request.meter``): who asks, and where the call's usage is kept.

        ``dialect``: the front's choice (it translated the request for it); None chooses
        from the merged parameters and the connector, as ml-commons does.

        ``cache``: the front's request as the response cache reads it (None: not cached).
        After the input guardrails the cache is consulted: a hit is admitted for the key's
        rpm only, and answered by ``run_cached`` or ``open_stream`` without a provider call.
        """
        if stream:
            self.check_stream_enabled()
        if model.interface:
            interfaces.check_input(model.interface, _input_instance(ask))
        connector = model.connector
        request_parameters = processing.escape_input_parameters(ask.parameters)
        if ask.reshape is not None:
            merged = merge_parameters(connector, request_parameters)
            call = self._render(model, merged, meter.request_id)
            body = json.dumps(ask.reshape(_json_object(call.request.body)), separators=(",", ":"),
                              ensure_ascii=False).encode("utf-8")
            calls = [UpstreamCall(merged, replace(call.request, body=body))]
        else:
            calls = [self._render(model, merged, meter.request_id)
                     for merged in self._predict_parameters(connector, ask.dataset, request_parameters, stream)]
        if dialect is None:
            parameters = calls[0].parameters
            dialect = dialect_for(parameters, connector) if stream else known_dialect(parameters, connector)
        self._rate_limiter.acquire(model.model_id, model.rate_limit)
        if model.guardrails is not None:  # as ml-commons: after the rate limit, each request's payload
            for call in calls:
                asked = call.parameters if ask.question is None else {"question": ask.question, **call.parameters}
                check_input(model.guardrails, (call.request.body or b"").decode("utf-8", "replace"),
                            asked, self._guardrail_checks)
        plan = self._plan(model, cache, meter)
        if plan is None:
            return self._admitted(model, calls, dialect, stream, meter)
        hit, flight = self._cache.consult(plan, stream)  # type: ignore[union-attr]
        state = meter.cache = CacheState("HIT" if hit else ("MISS" if plan.lookup else "REFRESH"), hit)
        if hit is not None:
            if self._accountant is not None:
                meter.admission = self._accountant.admit(meter.caller, model.model_id, cached=True)
                meter.model, meter.interface = model, dialect.name if dialect is not None else "-"
            meter.tokens = TokenCounts()
            self._metrics.cache_request(state.status)
            return Prepared(model, dialect, tuple(calls), stream, meter, plan, hit)
        try:
            prepared = self._admitted(model, calls, dialect, stream, meter)
            hit = self._cache.match(plan, flight, stream, meter.trace)  # type: ignore[union-attr]
        except BaseException:
            self._cache.land(plan, flight, None)  # type: ignore[union-attr]
            raise
        if hit is not None:  # by meaning: admitted as a call, recorded as a hit (its reservation released)
            meter.cache, meter.tokens = CacheState("HIT", hit), TokenCounts()
            self._metrics.cache_request("HIT")
            return replace(prepared, plan=plan, hit=hit)
        self._metrics.cache_request(state.status)
        return replace(prepared, plan=plan, flight=flight)

    def _plan(self, model: ResolvedModel, use: CacheUse | None, meter: CallMeter) -> Plan | None:
        if use is None or self._cache is None:
            return None
        plan, status = self._cache.plan(model.model_id, model.cache, model.config_version, use,
                                        meter.cache_controls, meter.caller)
        if plan is None:
            meter.cache = CacheState(status)
            self._metrics.cache_request(status)
        return plan

    def _admitted(self, model: ResolvedModel, calls: list[UpstreamCall], dialect: Dialect | None, stream: bool,
                  meter: CallMeter) -> Prepared:
        """The call let through by the key's limits and budgets (``prepare``'s last step)."""
        if self._accountant is not None:
            request_bytes = sum(len(call.request.body or b"") for call in calls)
            caller = meter.caller
            budgeted = caller is not None and (caller.key.limits.budget is not None
                                               or caller.tenant.limits.budget is not None)
            estimate = _estimated_cost(model, calls, request_bytes) if budgeted else 0.0
            if meter.admission is None:
                meter.admission = self._accountant.admit(meter.caller, model.model_id, estimate,
                                                         requests=meter.counts_request)
            else:  # a router's target: recorded as itself, its cost reserved once known
                meter.admission = self._accountant.reserve(replace(meter.admission, model_id=model.model_id),
                                                           meter.caller, estimate)
            meter.model, meter.interface = model, dialect.name if dialect is not None else "-"
            meter.request_bytes = request_bytes
        return Prepared(model, dialect, tuple(calls), stream, meter)

    @staticmethod
    def _predict_parameters(connector: Connector, dataset: processing.Dataset | None,
                            request_parameters: dict[str, Any], stream: bool) -> list[dict[str, Any]]:
        """The parameters of each upstream request of an ml-commons predict: ``text_docs``
        split by the connector's chunk size, each chunk through the pre-process function."""
        action = connector.action("predict")
        size = 1
        if isinstance(dataset, processing.TextDocs):
            size = processing.chunk_size(action.pre_process_function, connector.parameters, len(dataset.docs))
            requests = -(-len(dataset.docs) // size)
            if requests > MAX_UPSTREAM_REQUESTS_PER_CALL:
                raise BadRequest(
                    f"[text_docs] has {len(dataset.docs)} documents, which this model sends as {requests} requests "
                    f"({size} documents each); one predict call makes at most {MAX_UPSTREAM_REQUESTS_PER_CALL} "
                    f"requests ({MAX_UPSTREAM_REQUESTS_PER_CALL * size} documents): split the input")
        merged_each = []
        for chunk in processing.split_dataset(dataset, size):
            merged = _pre_processed(connector, chunk, request_parameters)
            if not stream:  # a stream's answer is never filtered
                processing.check_response_filter(merged.get(RESPONSE_FILTER))
            merged_each.append(merged)
        return merged_each

    def _render(self, model: ResolvedModel, merged: dict[str, Any], request_id: str) -> UpstreamCall:
        """The rendered request, its endpoint checked."""
        request = render_request(model.connector, merged)
        if request_id and not any(name.lower() == "x-request-id" for name in request.headers):
            request.headers["X-Request-Id"] = request_id  # lets the provider's logs be matched
        policy = self._cluster.endpoint_policy
        policy.check_literal_host(policy.check_url(request.url))
        return UpstreamCall(merged, request)

    # --- the response cache ------------------------------------------------------------

    def run_cached(self, prepared: Prepared, run: Callable[[Prepared], Any]) -> Any:
        """``run(prepared)`` (the call's non-stream answer), or the hit that answers it; a
        leader's answer is stored, and its waiters woken, however it ends."""
        plan = prepared.plan
        if plan is None:
            return run(prepared)
        if prepared.hit is not None:
            return ResponseCache.answer(plan.use, prepared.hit.entry)
        entry = None
        try:
            answer = run(prepared)
            tokens = (prepared.meter.tokens if prepared.meter is not None else None) or TokenCounts()
            entry = Entry(plan.use.keep(answer), input_tokens=tokens.input, output_tokens=tokens.output,
                          cost=cost_of(prepared.model.pricing, tokens.input, tokens.output, tokens.cached_input))
            return answer
        finally:
            self._cache.land(plan, prepared.flight, entry)  # type: ignore[union-attr, arg-type]

    def _stream_landed(self, prepared: Prepared, recording: Recording) -> None:
        """A leader stream is over (``PendingStream.ended``): stored if it completed."""
        plan, meter = prepared.plan, prepared.meter
        assert plan is not None and prepared.flight is not None
        entry = None
        try:
            tokens = (meter.tokens if meter is not None else None) or TokenCounts()
            entry = stream_entry(plan.use, recording, (tokens.input, tokens.output),
                                 cost_of(prepared.model.pricing, tokens.input, tokens.output, tokens.cached_input))
        except Exception:  # noqa: BLE001 - a front's conversion failing must not lose the flight
            log.exception("response cache: reading a stream's answer for the cache failed")
        self._cache.land(plan, prepared.flight, entry)  # type: ignore[union-attr]

    # --- non-stream -------------------------------------------------------------------

    def predict(self, prepared: Prepared) -> PredictResult:
        """The model's answer in ml-commons' ``inference_results`` shape: built-in
        post-process functions give tensors, otherwise the provider's JSON as ``response``."""
        try:
            answers = self._run(prepared)
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise
        _meter_tokens(prepared, [a.tokens for a in answers])
        upstream_seconds = max(a.done for a in answers) - min(a.sent for a in answers)
        body = {"inference_results": [a.entry for a in answers]}
        # MLPredictTaskRunner.validateOutputSchema: the answer, once the provider has given it
        interfaces.check_output(prepared.model.interface, body)
        return PredictResult(body, answers[-1].status, upstream_seconds)

    def exchange(self, prepared: Prepared) -> bytes:
        """A prepared request's non-stream answer: the provider's body."""
        try:
            payload = self._exchange(prepared.model.connector, prepared.request,
                                     prepared.model.guardrails, prepared)[1]
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise
        if prepared.meter is not None:
            _meter_tokens(prepared, [answer_tokens(payload)])
        return payload

    def _run(self, prepared: Prepared) -> list[_Answer]:
        calls, connector, guardrails = prepared.calls, prepared.model.connector, prepared.model.guardrails
        count_tokens = prepared.meter is not None
        if len(calls) == 1:
            return [self._answer(connector, calls[0], count_tokens, guardrails, prepared)]
        lanes = min(len(calls), connector.client_config.max_connection, MAX_FANOUT)
        answers: list[_Answer | None] = [None] * len(calls)
        failed = threading.Event()

        def lane(first: int) -> None:
            # Lane k runs requests k, k + lanes, ...: input order is kept by index.
            for index in range(first, len(calls), lanes):
                if failed.is_set():
                    return
                try:
                    answers[index] = self._answer(connector, calls[index], count_tokens, guardrails, prepared)
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

    def _answer(self, connector: Connector, call: UpstreamCall, count_tokens: bool,
                guardrails: Guardrails | None, prepared: Prepared) -> _Answer:
        sent = time.monotonic()
        status, payload = self._exchange(connector, call.request, guardrails, prepared)
        done = time.monotonic()
        output = _output(connector.action("predict").post_process_function, payload, call.parameters)
        tokens = answer_tokens(payload) if count_tokens else None
        return _Answer({"output": output, "status_code": status}, status, sent, done, tokens)

    def _exchange(self, connector: Connector, request: UpstreamRequest,
                  guardrails: Guardrails | None = None, prepared: Prepared | None = None) -> tuple[int, bytes]:
        """One non-stream upstream call: the provider's 2xx status and body, or its error
        raised; the model's output guardrail checks the body (ml-commons' processOutput)."""
        call = self._call(request, connector, prepared)
        response = call.open(_wait_uninterrupted)
        payload = call.read_body(response)
        if response.status >= 300:
            raise call.error(response, payload)
        if guardrails is not None:
            check_output(guardrails, payload.decode("utf-8", "replace"), self._guardrail_checks)
        return response.status, payload

    def call_action(self, model: ResolvedModel, action: Action, parameters: Mapping[str, Any], *,
                    request_id: str = "", rate_limited: bool = False,
                    meter: CallMeter | None = None) -> ActionAnswer:
        """Call ``action`` (one of the connector's, or one made for it: a batch job's status
        or cancel call) with ``parameters`` over the connector's: rendered, its endpoint
        checked, sent, its answer through the action's post-process function. The
        model's rate limit is taken when ``rate_limited`` (a client's own request)."""
        connector = replace(model.connector, actions=(action, *model.connector.actions))
        merged = merge_parameters(connector, processing.escape_input_parameters(parameters))
        request = render_request(connector, merged, action.action_type)
        if request_id and not any(name.lower() == "x-request-id" for name in request.headers):
            request.headers["X-Request-Id"] = request_id
        policy = self._cluster.endpoint_policy
        policy.check_literal_host(policy.check_url(request.url))
        if rate_limited:
            self._rate_limiter.acquire(model.model_id, model.rate_limit)
        if meter is not None and self._accountant is not None:
            # A client's own call (a batch job's submission): its key's limits apply, and it is
            # recorded with no tokens (the job's own are the provider's to bill).
            meter.admission = self._accountant.admit(meter.caller, model.model_id)
            meter.model, meter.interface, meter.tokens = model, action.action_type, TokenCounts()
        try:
            status, payload = self._exchange(connector, request)
        except UpstreamError as error:
            self._metrics.upstream_failure(error)
            raise
        return ActionAnswer(status, _output(action.post_process_function, payload, merged))

    # --- stream -------------------------------------------------------------------------

    def open_stream(self, prepared: Prepared, kind: StreamKind = StreamKind.TEXT) -> PendingStream:
        """Prepare relaying the model's answer: its channel, and the call that starts it.
        ``start()`` raises Overloaded when the pool is full."""
        if prepared.hit is not None:
            channel, relays = ResponseCache.replay(prepared.plan.use, prepared.hit.entry)  # type: ignore[union-attr]
            return PendingStream(channel, _nothing, replay_relays=relays)
        if prepared.plan is None:
            channel = Channel(self._server.stream_queue_chunks)
            ended = None
        else:
            recording = Recording(self._server.cache_max_entry_bytes)
            channel = RecordingChannel(self._server.stream_queue_chunks, recording)
            ended = partial(self._stream_landed, prepared, recording)
        try:
            call = self.stream_call(prepared, kind, channel)
        except BaseException:
            if ended is not None:
                ended()
            raise
        return PendingStream(channel, partial(start_stream, self._pool, self._watcher, channel, *call,
                                              self._server.client_stall_timeout), ended)

    # --- any model, a router included --------------------------------------------------

    def call_recorded(self, model: AnyModel, bind: Bind, caller: Caller | None, *, route: str,
                      counts_request: bool = False, trace: RequestTrace | None = None) -> Any:
        """``call`` for a call that is not a request's own (a semantic cache's embedding, an
        agent's tool): its own meter, admitted as the caller (``counts_request`` False: no
        rpm place, the request it serves took one), its own usage record on ``route``, and its
        provider call's span under the request's (``trace``)."""
        started = time.monotonic()
        meter = CallMeter(caller=caller, request_id=f"{route.rsplit('/', 1)[-1]}-{uuid.uuid4().hex}",
                          counts_request=counts_request, trace=trace)
        outcome, status = "error", 500
        try:
            answer = self.call(model, bind, meter)
            outcome, status = "ok", 200
            return answer
        except MLStreamError as error:
            status = error.http_status
            raise
        finally:
            record = meter.usage(route=route, status=status, outcome=outcome, relayed=0, first_token_ms=None,
                                 duration_ms=(time.monotonic() - started) * 1000)
            if record is not None and self._accountant is not None:
                self._accountant.record(record)

    def tensors(self, model: AnyModel, ask: Ask, meter: CallMeter, cache: CacheUse | None = None) -> PredictResult:
        """ml-commons' ``_predict``: ``prepare`` and ``predict`` on the model, or on a router's
        targets in turn (which must share the client's parameters: not ``mixed_providers``)."""
        check_one_api(model)
        return self.call(model, lambda target: Bound(ask, run=self.predict), meter, cache)

    def call(self, model: AnyModel, bind: Bind, meter: CallMeter, cache: CacheUse | None = None) -> Any:
        """A non-stream call: the bound request's ``run`` on the model (or its cached answer:
        ``cache``), or on a router's targets in turn until one answers (routers are not cached)."""
        if isinstance(model, ResolvedModel):
            bound = bind(model)
            return self.run_cached(self.prepare(model, bound.ask, meter, dialect=bound.dialect, cache=cache),
                                   bound.run)
        attempts = self._attempts(model, bind, meter, False)
        prepared, bound = attempts.first()
        while True:
            try:
                result = bound.run(prepared)
            except BaseException as error:
                attempts.release()  # before the next target is taken
                if not isinstance(error, MLStreamError):
                    raise
                following = attempts.after(error)
                if isinstance(following, MLStreamError):
                    raise following from None
                prepared, bound = following
                continue
            attempts.release()
            attempts.succeeded()
            return result

    def stream(self, model: AnyModel, bind: Bind, meter: CallMeter, cache: CacheUse | None = None) -> PendingStream:
        """A front's stream: ``open_stream`` on the model (a replay when ``cache`` has it), or
        on a router's first target that prepares, the reader moving on to the next when one
        fails before answering."""
        if isinstance(model, ResolvedModel):
            bound = bind(model)
            return self.open_stream(self.prepare(model, bound.ask, meter, stream=True, dialect=bound.dialect,
                                                 cache=cache), bound.kind)
        self.check_stream_enabled()
        attempts = self._attempts(model, bind, meter, True)
        prepared, bound = attempts.first()
        channel = Channel(self._server.stream_queue_chunks)
        reroute = _Reroute(self, attempts, channel)
        return PendingStream(channel, partial(start_stream, self._pool, self._watcher, channel,
                                              *self.stream_call(prepared, bound.kind, channel),
                                              self._server.client_stall_timeout, reroute), attempts.release)

    def stream_call(self, prepared: Prepared, kind: StreamKind,
                    channel: Channel) -> tuple[ProviderCall, StreamDecoder]:
        dialect = prepared.dialect
        if not prepared.stream or dialect is None:
            raise TypeError("a stream call needs a call prepared with stream=True")
        connector = prepared.model.connector
        call = self._call(dialect.stream_request(prepared.request, connector, prepared.parameters), connector,
                          prepared)
        decoder = dialect.new_decoder(kind)
        if call.trace is not None:  # the span sees the stream's first chunk and its end
            decoder = call.trace.relaying(decoder, channel)
        return call, decoder

    def _attempts(self, router: RouterModel, bind: Bind, meter: CallMeter, stream: bool) -> "_Attempts":
        """A router's call begun: its own rate limit and the key's admission taken once."""
        if self._resolve is None:
            raise BadRequest(f"model [{router.model_id}] is a router: routing is not served here")
        self._rate_limiter.acquire(router.model_id, router.rate_limit)
        if self._accountant is not None:
            meter.admission = self._accountant.admit(meter.caller, router.model_id)
        meter.router = router.model_id
        return _Attempts(self, router, bind, meter, stream, self._resolve)

    def _call(self, request: UpstreamRequest, connector: Connector, prepared: Prepared | None = None) -> ProviderCall:
        trace = None
        if self._telemetry is not None and prepared is not None:
            trace = self._telemetry.provider_call(
                request, connector, dialect=prepared.dialect.name if prepared.dialect is not None else None,
                parent=prepared.meter.trace if prepared.meter is not None else None, stream=prepared.stream)
        return ProviderCall(self._upstream, request, connector,
                            allow_private=self._cluster.endpoint_policy.allow_private,
                            on_retry=self._metrics.upstream_retry, trace=trace)


def check_one_api(model: AnyModel) -> None:
    """ml-commons' predict routes send a router's every target the client's parameters as
    they are: refused for a router whose targets speak different provider APIs."""
    if isinstance(model, RouterModel) and model.routing.mixed_providers:
        raise BadRequest(f"router model [{model.model_id}] mixes provider APIs (routing.mixed_providers): "
                         "_predict would send each target the same parameters; call it through /v1")


class _Attempts:
    """One router call, target by target: the candidates left (``routing.candidates``),
    what was tried and how it failed, the target in flight (its count in ``RouterHealth``).

    Used by one thread at a time, but ``release`` may come from the transport when the
    stream ends while the reader is between targets: a small lock keeps the count right."""

    def __init__(self, predictor: Predictor, router: RouterModel, bind: Bind, meter: CallMeter, stream: bool,
                 resolve: Callable[[str, Caller | None], AnyModel]) -> None:
        self._predictor = predictor
        self._router = router
        self._bind = bind
        self._meter = meter
        self._stream = stream
        self._resolve = resolve
        self._health = predictor._health
        self._metrics = predictor._metrics
        self._order = candidates(router.model_id, router.routing, self._health, self._routing_of)
        self._tried: list[str] = []         # "<target>: <why>", for the final error
        self._current: tuple[str, str, Routing] | None = None  # (its router, target, that router's routing)
        self._in_flight = False
        self._lock = threading.Lock()       # guards _in_flight only

    def _routing_of(self, model_id: str) -> Routing | None:
        try:
            model = self._resolve(model_id, self._meter.caller)
        except MLStreamError:
            return None  # tried as a plain model: its own error says why it cannot serve
        return model.routing if isinstance(model, RouterModel) else None

    def first(self) -> tuple[Prepared, Bound]:
        following = self._next(None)
        if isinstance(following, MLStreamError):
            raise following
        return following

    def after(self, error: MLStreamError) -> tuple[Prepared, Bound] | MLStreamError:
        """The next target prepared after ``error`` from the current one, or the error the
        call ends with: ``error`` itself when no other target could do better."""
        owner, target, routing = self._current  # type: ignore[misc]
        kind = retry_class(error)
        if kind is None or kind not in routing.retry_on:
            self._metrics.routing_attempt(owner, target, "error")
            return error
        self._metrics.routing_attempt(owner, target, "failed")
        if self._health.failed(target, routing):
            log.warning("router [%s]: target [%s] failed %d times in a row, cooling down for %g s",
                        owner, target, routing.allowed_fails, routing.cooldown_s)
        return self._next(error)

    def _next(self, error: MLStreamError | None) -> tuple[Prepared, Bound] | MLStreamError:
        if error is not None:
            self._tried.append(f"{self._current[1] if self._current else '?'}: {error.reason}")
        for owner, target, routing in self._order:
            self._current = (owner, target, routing)
            self._meter.target = target
            try:
                model = self._resolve(target, self._meter.caller)
                if not isinstance(model, ResolvedModel):
                    raise BadRequest(f"model [{target}] nests routers too deep")
                bound = self._bind(model)
                prepared = self._predictor.prepare(model, bound.ask, self._meter, stream=self._stream,
                                                   dialect=bound.dialect)
            except AccessDenied:
                # Every target is checked against the caller: one it may not use is skipped
                # (never called, never deployed), and the call ends with an earlier target's failure.
                self._tried.append(f"{target}: not available to this API key")
                self._metrics.routing_attempt(owner, target, "unavailable")
                error = error or NotFound(f"model [{target}] is not available to this API key")
                continue
            except (NotFound, Forbidden) as missing:  # deleted or disabled since: the others may serve
                self._tried.append(f"{target}: {missing.reason}")
                self._metrics.routing_attempt(owner, target, "unavailable")
                error = missing
                continue
            except MLStreamError as refused:
                if retry_class(refused) not in routing.retry_on:  # the request's own fault
                    self._metrics.routing_attempt(owner, target, "error")
                    return refused
                self._tried.append(f"{target}: {refused.reason}")
                self._metrics.routing_attempt(owner, target, "failed")
                error = refused
                continue
            with self._lock:
                self._health.begin(target)
                self._in_flight = True
            return prepared, bound
        assert error is not None  # a router has at least one target
        return self._exhausted(error)

    def _exhausted(self, last: MLStreamError) -> MLStreamError:
        """The last target's error, every attempt listed in its reason."""
        reason = f"{last.reason} [router {self._router.model_id} tried: {'; '.join(self._tried)}]"
        last.reason, last.args = reason, (reason,)
        return last

    def succeeded(self) -> None:
        owner, target, _ = self._current  # type: ignore[misc]
        self._health.succeeded(target)
        self._metrics.routing_attempt(owner, target, "served")

    def release(self) -> None:
        """The target in flight is done (idempotent)."""
        with self._lock:
            if not self._in_flight:
                return
            self._in_flight = False
            target = self._current[1]  # type: ignore[index]
        self._health.end(target)


class _Reroute:
    """``reader.Reroute`` for a router's stream: the next target's call and decoder."""

    def __init__(self, predictor: Predictor, attempts: _Attempts, channel: Channel) -> None:
        self._predictor = predictor
        self._attempts = attempts
        self._channel = channel

    def after(self, error: MLStreamError) -> tuple[ProviderCall, StreamDecoder] | MLStreamError:
        self._attempts.release()
        try:
            following = self._attempts.after(error)
        except Exception:  # noqa: BLE001 - a bug on the reader's thread must still end the stream
            log.exception("router: choosing the next target failed")
            return MLStreamError("internal error: the server failed to choose the router's next target")
        if isinstance(following, MLStreamError):
            return following
        prepared, bound = following
        return self._predictor.stream_call(prepared, bound.kind, self._channel)

    def opened(self) -> None:
        self._attempts.succeeded()


def _estimated_cost(model: ResolvedModel, calls: list[UpstreamCall], request_bytes: int) -> float:
    """What a call will cost at most, as far as its request tells (its budget reservation):
    its request's bytes as input tokens, its output cap (else DEFAULT_OUTPUT_ESTIMATE) as
    output, per upstream request. 0 for a model without pricing."""
    if model.pricing is None:
        return 0.0
    output = 0
    for call in calls:
        try:
            body = loads_json(call.request.body) if call.request.body else None
        except ValueError:
            body = None
        output += output_cap(body) or DEFAULT_OUTPUT_ESTIMATE
    return cost_of(model.pricing, -(-request_bytes // ESTIMATED_BYTES_PER_TOKEN), output) or 0.0


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


def _input_instance(ask: Ask) -> dict[str, Any]:
    """What a model's input schema checks: ml-commons' MLInput for this call (the client's
    parameters as sent, or its dataset)."""
    dataset = ask.dataset
    if isinstance(dataset, processing.TextDocs):
        return interfaces.input_instance(None, dataset.docs)
    if isinstance(dataset, processing.TextSimilarity):
        return interfaces.input_instance(None, dataset.docs, dataset.query_text)
    return interfaces.input_instance(ask.parameters)


def _meter_tokens(prepared: Prepared, counted: list[TokenCounts | None]) -> None:
    """The answers' counts on the call's meter: their sum, if every answer had them."""
    if prepared.meter is not None and counted and all(c is not None for c in counted):
        prepared.meter.tokens = sum(counted[1:], counted[0])  # type: ignore[arg-type]


def _nothing() -> None:
    """A replayed stream's start: its channel already holds every item."""


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
