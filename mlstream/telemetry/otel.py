"""The OpenTelemetry SDK side of ``telemetry``: imported only when export is on.

    OtelTelemetry      one per server process: tracer and meter providers, their OTLP/HTTP
                       (protobuf) exporters, the GenAI client histograms
    ServerSpan         RequestTrace: the SERVER span, in the HTTP conventions
    ProviderCallSpan   CallTrace: the CLIENT span, in the GenAI conventions, and the call's metrics
    WatchedDecoder     a stream's decoder, whose items the call's span sees on their way

The SDK reads its standard variables itself: OTEL_EXPORTER_OTLP_ENDPOINT (and the
per-signal ones) when ``--otel-endpoint`` is not given, OTEL_EXPORTER_OTLP_HEADERS,
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG] (default: parent-based
always-on, so a caller's unsampled ``traceparent`` is respected), OTEL_BSP_*,
OTEL_METRIC_EXPORT_INTERVAL, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT; OTEL_TRACES_EXPORTER and
OTEL_METRICS_EXPORTER=none turn one signal's export off, as the SDK's auto-configuration does.

Spans are started and ended with explicit parents, never the thread's current context: a
stream's CLIENT span starts on the handler thread and ends on a pool worker.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import replace
from typing import Any, Callable

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import __version__
from ..models.connectors import Connector, UpstreamRequest
from ..errors import ClientGone, MLStreamError
from ..providers.base import StreamDecoder
from ..providers.events import Done, StreamItem
from ..usage.tokens import TokenCounts, answer_tokens
from . import genai
from .hooks import CancelledStream, Opened, RequestTrace

SCOPE = "mlstream"  # the instrumentation scope of every span and metric
# The explicit bucket boundaries the GenAI metrics conventions give (gen-ai-metrics.md).
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
# How long flushing and shutting down may wait for the collector.
FLUSH_MILLIS = 5000
# The headers the trace context travels in; a connector's own are replaced.
_CONTEXT_HEADERS = frozenset({"traceparent", "tracestate"})


class OtelTelemetry:
    """The process's tracer and meter, exporting over OTLP/HTTP (protobuf).

    ``endpoint``: the ``--otel-endpoint`` base URL (``/v1/traces`` and ``/v1/metrics``
    under it), or None for the SDK's own reading of OTEL_EXPORTER_OTLP_*ENDPOINT."""

    def __init__(self, endpoint: str | None, *, capture_content: bool = False) -> None:
        resource = process_resource()
        # sampler None: the SDK's, from OTEL_TRACES_SAMPLER[_ARG]
        self._tracer_provider = TracerProvider(resource=resource)
        if exported("traces"):
            self._tracer_provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=signal_url(endpoint, "traces"))))
        readers = [PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=signal_url(endpoint, "metrics")))
                   ] if exported("metrics") else []
        self._meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        self.tracer = self._tracer_provider.get_tracer(SCOPE, __version__)
        meter = self._meter_provider.get_meter(SCOPE, __version__)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.time_to_first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time to receive the first chunk, measured from when the client issues the generation "
                        "request to when the first chunk is received in the response stream.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.capture_content = capture_content
        self.propagator = TraceContextTextMapPropagator()

    def server_request(self, method: str, path: str, headers: Any, client: str, scheme: str,
                       request_id: str = "") -> ServerSpan:
        parent = self.propagator.extract(headers)  # the caller's traceparent and tracestate, if any
        span = self.tracer.start_span(method, context=parent, kind=SpanKind.SERVER, attributes={
            "http.request.method": method, "url.path": path, "url.scheme": scheme, "client.address": client,
            "mlstream.request.id": request_id})
        return ServerSpan(span, method)

    def provider_call(self, request: UpstreamRequest, connector: Connector, *, dialect: str | None,
                      parent: RequestTrace | None, stream: bool) -> ProviderCallSpan:
        body = genai.parse_body(request.body)
        facts = genai.call_facts(request.url, body, dialect=dialect, protocol=connector.protocol,
                                 parameters=connector.parameters, stream=stream)
        context = set_span_in_context(parent.span) if isinstance(parent, ServerSpan) else None
        return ProviderCallSpan(self, facts, context, body if self.capture_content else None)

    def flush(self, timeout_seconds: float = FLUSH_MILLIS / 1000) -> bool:
        millis = int(timeout_seconds * 1000)
        spans = self._tracer_provider.force_flush(millis)
        return self._meter_provider.force_flush(millis) and spans

    def shutdown(self) -> None:
        self.flush()
        self._tracer_provider.shutdown()
        self._meter_provider.shutdown(timeout_millis=FLUSH_MILLIS)


def exported(signal: str) -> bool:
    """OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER=none turns one signal's export off (a
    backend that takes traces only, say); any other value is OTLP, the one exporter here."""
    return os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp").strip().lower() != "none"


def signal_url(endpoint: str | None, signal: str) -> str | None:
    """``--otel-endpoint`` is a base URL, like OTEL_EXPORTER_OTLP_ENDPOINT: each signal's
    path goes under it. None leaves the exporter to the SDK's variables."""
    return None if endpoint is None else f"{endpoint.rstrip('/')}/v1/{signal}"


def process_resource() -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win), named
    ``mlstream`` unless named otherwise, with an id of its own per process: the workers of
    ``--workers N`` each export their own cumulative metrics, which must not be taken for
    one series."""
    detected = Resource.create()
    attributes = dict(detected.attributes)
    if str(attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = "mlstream"
    attributes.setdefault("service.version", __version__)
    attributes.setdefault("service.instance.id", str(uuid.uuid4()))
    return Resource(attributes, detected.schema_url)


class ServerSpan:
    """A request's SERVER span: ``{method} {route}``, the HTTP conventions' attributes."""

    __slots__ = ("span", "_method", "_outcome", "_failure")

    def __init__(self, span: Span, method: str) -> None:
        self.span = span
        self._method = method
        self._outcome: str | None = None
        self._failure: MLStreamError | None = None

    def routed(self, template: str, model_id: str | None) -> None:
        self.span.update_name(f"{self._method} {template}")
        self.span.set_attribute("http.route", template)
        if model_id:
            self.span.set_attribute("mlstream.model.id", model_id)

    def stream_ended(self, outcome: str, failure: MLStreamError | None = None) -> None:
        self._outcome, self._failure = outcome, failure

    def end(self, status: int) -> None:
        span = self.span
        error: str | None = None
        if status:
            span.set_attribute("http.response.status_code", status)
        if self._outcome == "client_gone" or not status:
            error = "client_gone"
        elif self._outcome == "failed":  # a final error event after the 200
            error = genai.error_type(self._failure) if self._failure is not None else "stream"
        elif status >= 500:
            error = str(status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
        span.end()


class ProviderCallSpan:
    """A provider call's CLIENT span and GenAI metrics, from the first attempt to the last byte.

    Its methods are called in turn, never at once: by the thread that opens the call,
    then (a stream) by the one reading it, which the channel's hand-over orders."""

    def __init__(self, telemetry: OtelTelemetry, facts: genai.CallFacts, context: Any,
                 request_body: Any) -> None:
        self._telemetry = telemetry
        self._facts = facts
        self._context = context            # the parent (the request's SERVER span), or None: a root
        self._request_body = request_body  # only kept when content is captured
        self._span: Span | None = None
        self._started = 0.0                # time.monotonic() at the first attempt
        self._retries = 0
        self._first_chunk: float | None = None  # seconds from the start to the body's first bytes
        self._done: Done | None = None
        self._error: MLStreamError | None = None
        self._error_type: str | None = None
        self._answer: genai.AnswerFacts | None = None
        self._tokens: TokenCounts | None = None
        self._output: list[dict[str, Any]] | None = None
        self._channel: CancelledStream | None = None
        self._items: list[StreamItem] | None = None  # a stream's items, when content is captured
        self._ended = False

    def open(self, open_response: Callable[[Any], Opened], wait: Any) -> Opened:
        facts = self._facts
        self._started = time.monotonic()
        span = self._span = self._telemetry.tracer.start_span(
            facts.span_name, context=self._context, kind=SpanKind.CLIENT, attributes=facts.attributes())
        if self._request_body is not None and span.is_recording():
            messages, system = genai.input_messages(self._request_body)
            span.set_attribute("gen_ai.input.messages", _json(messages))
            if system:
                span.set_attribute("gen_ai.system_instructions", _json(system))
        self._request_body = None
        try:
            return open_response(wait)
        except MLStreamError as error:
            self.failed(error)
            self._end()
            raise

    def attempt(self, request: UpstreamRequest) -> UpstreamRequest:
        carrier: dict[str, str] = {}
        self._telemetry.propagator.inject(carrier, context=set_span_in_context(self._span))
        headers = {name: value for name, value in request.headers.items() if name.lower() not in _CONTEXT_HEADERS}
        return replace(request, headers={**headers, **carrier})

    def retried(self, status: int) -> None:
        self._retries += 1
        if self._span is not None:
            self._span.add_event("mlstream.upstream.retry", {"http.response.status_code": status,
                                                    "mlstream.attempt": self._retries + 1})

    def read_whole(self, read: Callable[[Any], bytes], response: Any) -> bytes:
        try:
            payload = read(response)
        except MLStreamError as error:
            self.failed(error)
            self._end()
            raise
        if response.status >= 300:
            self._error_type = str(response.status)
        else:
            self._tokens = answer_tokens(payload)
            if self._span is not None and self._span.is_recording():
                answer = genai.parse_body(payload)
                self._answer = genai.answer_facts(answer)
                if self._telemetry.capture_content:
                    self._output = genai.output_messages(answer)
        self._end()
        return payload

    def failed(self, error: MLStreamError) -> None:
        if self._error is None:
            self._error = error

    def relaying(self, decoder: StreamDecoder, channel: CancelledStream) -> StreamDecoder:
        self._channel = channel
        if self._telemetry.capture_content:
            self._items = []
        return WatchedDecoder(decoder, self)

    def saw(self, data: bytes, items: list[StreamItem]) -> None:
        """What the stream's decoder made of ``data``: the first bytes' time, the Done."""
        if self._first_chunk is None and data:
            self._first_chunk = time.monotonic() - self._started
        if items:
            if self._items is not None:
                self._items.extend(items)
            if type(items[-1]) is Done:  # a Done or Failure is always last
                self._done = items[-1]

    def finished(self) -> None:
        if self._ended:
            return
        if self._done is None and self._error is None:
            # The reader stopped before the end: its channel was cancelled (the client
            # left or stopped reading, or the server shut down).
            reason = self._channel.cancel_reason if self._channel is not None else None
            self._error = reason or ClientGone("the client went away before the answer ended")
        done = self._done
        if done is not None:
            self._tokens = done.tokens
            self._answer = genai.AnswerFacts(done.response_id, done.response_model,
                                             (done.finish_reason,) if done.finish_reason else ())
        if self._items is not None:
            self._output = genai.streamed_output(self._items, done)
        self._end()

    def _end(self) -> None:
        if self._ended or self._span is None:
            return
        self._ended = True
        telemetry, span, facts = self._telemetry, self._span, self._facts
        duration = time.monotonic() - self._started
        attributes = facts.metric_attributes()
        answer = self._answer
        if answer is not None and answer.response_model:
            attributes["gen_ai.response.model"] = answer.response_model
        tokens = self._tokens
        if tokens is not None:
            telemetry.token_usage.record(tokens.input, {**attributes, "gen_ai.token.type": "input"})
            telemetry.token_usage.record(tokens.output, {**attributes, "gen_ai.token.type": "output"})
        if self._first_chunk is not None:
            telemetry.time_to_first_chunk.record(self._first_chunk, attributes)
        error_type = self._error_type or (genai.error_type(self._error) if self._error is not None else None)
        if error_type is not None:
            attributes["error.type"] = error_type
        telemetry.operation_duration.record(duration, attributes)
        if not span.is_recording():
            span.end()
            return
        if answer is not None:
            if answer.response_id:
                span.set_attribute("gen_ai.response.id", answer.response_id)
            if answer.response_model:
                span.set_attribute("gen_ai.response.model", answer.response_model)
            if answer.finish_reasons:
                span.set_attribute("gen_ai.response.finish_reasons", answer.finish_reasons)
        if tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", tokens.input)
            span.set_attribute("gen_ai.usage.output_tokens", tokens.output)
            if tokens.cached_input:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", tokens.cached_input)
        if self._first_chunk is not None:
            span.set_attribute("gen_ai.response.time_to_first_chunk", self._first_chunk)
        if self._output is not None:
            span.set_attribute("gen_ai.output.messages", _json(self._output))
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, self._error.reason if self._error is not None else None))
        span.end()


class WatchedDecoder:
    """A stream's decoder whose items its call's span sees (``ProviderCallSpan.saw``)."""

    __slots__ = ("_decoder", "_call")

    def __init__(self, decoder: StreamDecoder, call: ProviderCallSpan) -> None:
        self._decoder = decoder
        self._call = call

    def feed(self, data: bytes) -> list[StreamItem]:
        items = self._decoder.feed(data)
        self._call.saw(data, items)
        return items

    def finish(self) -> list[StreamItem]:
        items = self._decoder.finish()
        self._call.saw(b"", items)
        return items


def _json(value: Any) -> str:
    # Structured values are not span attributes yet: the conventions say a JSON string.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
