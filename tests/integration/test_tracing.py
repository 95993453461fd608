"""Traces and GenAI metrics over OTLP/HTTP, as a collector receives them (docs/tracing.md).

The server exports to a fake collector on loopback that decodes the protobuf
(``mlstream.testing.fake_collector``); tests wait on what it has received, never on a
time: spans go out on the SDK's schedule, shortened here (OTEL_BSP_SCHEDULE_DELAY), and
metrics when the server's telemetry is flushed.
"""

from __future__ import annotations

import json
import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from mlstream.app.compose import Server
from mlstream.telemetry.otel import SECONDS_BUCKETS, TOKEN_BUCKETS
from mlstream.testing import fake_anthropic, fake_gemini
from mlstream.testing.fake_anthropic import FakeAnthropic
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_collector import FakeCollector, ReceivedSpan
from mlstream.testing.fake_gemini import FakeGemini
from mlstream.testing.fake_openai import DEFAULT_TEXT, FakeOpenAI, Scenario

from ..support.clients import Client
from ..support.servers import start_serve, stop_serve
from ..support.connectors import (BEDROCK_MODEL, bedrock_connector, bedrock_stream, openai_connector,
                                  openai_embedding_connector, titan_connector)
from ..support.streams import SEED_MESSAGES, open_stream, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request

ROOT = Path(__file__).resolve().parents[2]
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
STREAM_ROUTE = "POST /_plugins/_ml/models/{model_id}/_predict/stream"
PREDICT_ROUTE = "POST /_plugins/_ml/models/{model_id}/_predict"


@pytest.fixture
def collector() -> Iterator[FakeCollector]:
    with FakeCollector(decode=True) as running:
        yield running


@pytest.fixture
def traced(collector: FakeCollector, make_server: Callable[..., Server],
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., Server]:
    """``make_server`` exporting to the collector; spans leave within milliseconds of their end.
    (The collector is set up first, so it is stopped after the servers' last export.)"""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")

    def start(**overrides: Any) -> Server:
        return make_server(otel_endpoint=collector.url, **overrides)

    return start


def traceparent(trace_id: str = CALLER_TRACE, span_id: str = CALLER_SPAN, sampled: bool = True) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"}


def spans_of(collector: FakeCollector, trace_id: str, *names: str) -> dict[str, ReceivedSpan]:
    """Once every span of ``names`` in ``trace_id`` has arrived: each, by name."""
    def arrived(stats: Any) -> bool:
        return {span.name for span in stats.spans if span.trace_id == trace_id} >= set(names)

    assert collector.stats.wait_for(arrived, HANG_GUARD), [(s.name, s.trace_id) for s in collector.stats.spans]
    found = {span.name: span for span in collector.stats.spans if span.trace_id == trace_id}
    return {name: found[name] for name in names}


def client_span(collector: FakeCollector, name: str, predicate: Callable[[ReceivedSpan], bool] = lambda s: True,
                ) -> ReceivedSpan:
    """The first CLIENT span named ``name`` that ``predicate`` accepts, once it has arrived."""
    def matching(stats: Any) -> list[ReceivedSpan]:
        return [s for s in stats.named(name) if s.kind == "client" and predicate(s)]

    assert collector.stats.wait_for(lambda stats: matching(stats), HANG_GUARD), collector.stats.spans
    return matching(collector.stats)[0]


def parsed_traceparent(value: str) -> tuple[str, str, bool]:
    """(trace id, span id, sampled) of a W3C traceparent."""
    version, trace_id, span_id, flags = value.split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


def all_values(span: ReceivedSpan) -> str:
    return json.dumps([span.attributes, span.events, span.status_message, span.resource], default=str)


def test_a_stream_is_a_server_span_over_a_client_span_continuing_the_callers_trace(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body(stream_options={"include_usage": True})).encode(),
                           headers=traceparent())
    assert response.status == 200 and response.complete

    spans = spans_of(collector, CALLER_TRACE, STREAM_ROUTE, "chat gpt-3.5-turbo")
    request, call = spans[STREAM_ROUTE], spans["chat gpt-3.5-turbo"]
    # the SERVER span continues the caller's trace; the CLIENT span is its child
    assert request.kind == "server" and request.parent_span_id == CALLER_SPAN
    assert call.kind == "client" and call.parent_span_id == request.span_id
    assert request.attributes == {
        "http.request.method": "POST", "http.route": "/_plugins/_ml/models/{model_id}/_predict/stream",
        "http.response.status_code": 200, "url.path": f"/_plugins/_ml/models/{model_id}/_predict/stream",
        "url.scheme": "http", "client.address": "127.0.0.1", "mlstream.model.id": model_id,
        "mlstream.request.id": response.headers["x-request-id"]}
    assert request.status == "unset" and call.status == "unset"

    upstream = fake.stats.requests[-1]
    attributes = call.attributes
    assert attributes == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-3.5-turbo",
        "gen_ai.request.stream": True, "server.address": "127.0.0.1", "server.port": fake.port,
        "gen_ai.response.id": attributes["gen_ai.response.id"], "gen_ai.response.model": "gpt-3.5-turbo",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": attributes["gen_ai.usage.input_tokens"],
        "gen_ai.usage.output_tokens": len(DEFAULT_TEXT.split()),
        "gen_ai.response.time_to_first_chunk": attributes["gen_ai.response.time_to_first_chunk"]}
    assert attributes["gen_ai.response.id"].startswith("chatcmpl-") and attributes["gen_ai.usage.input_tokens"] > 0
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < (call.end_ns - call.start_ns) / 1e9
    # the provider got the CLIENT span's context, sampled
    assert parsed_traceparent(upstream.headers["traceparent"]) == (CALLER_TRACE, call.span_id, True)
    # no prompt, no answer, no credential
    assert not any(name.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system")) for name in attributes)
    everything = all_values(call) + all_values(request)
    assert fake.api_key not in everything and "Bearer" not in everything
    assert call.resource["service.name"] == "mlstream" and call.scope == "mlstream"


def test_a_request_without_traceparent_starts_a_trace_and_a_whole_answer_has_its_facts(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    # the OpenAI front sets the client's sampling settings on the connector's body
    reply = client.call("POST", "/v1/chat/completions", {
        "model": model_id, "messages": SEED_MESSAGES, "max_tokens": 50, "temperature": 0.25, "top_p": 0.5})
    assert reply.status == 200
    call = client_span(collector, "chat gpt-3.5-turbo")
    # The request's SERVER span ends after its reply is written: it may be exported after the call's.
    assert collector.stats.wait_for(lambda stats: any(s.span_id == call.parent_span_id for s in stats.spans),
                                    HANG_GUARD), collector.stats.spans
    request = next(s for s in collector.stats.spans if s.span_id == call.parent_span_id)
    assert request.name == "POST /v1/chat/completions" and request.parent_span_id == ""
    assert request.attributes["http.route"] == "/v1/chat/completions"
    attributes = call.attributes
    assert (attributes["gen_ai.request.max_tokens"], attributes["gen_ai.request.temperature"],
            attributes["gen_ai.request.top_p"]) == (50, 0.25, 0.5)
    assert "gen_ai.request.stream" not in attributes and "gen_ai.response.time_to_first_chunk" not in attributes
    assert attributes["gen_ai.response.id"] == reply.body["id"]
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        reply.body["usage"]["prompt_tokens"], reply.body["usage"]["completion_tokens"])
    sent = parsed_traceparent(fake.stats.requests[-1].headers["traceparent"])
    assert sent == (call.trace_id, call.span_id, True)


def test_each_retry_is_an_event_and_every_attempt_carries_the_client_spans_context(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(status=503).to_model(),
                                                 client_config={"max_retry_times": 2, "retry_backoff_millis": 1}))
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", stream_body(), headers=traceparent())
    assert reply.status == 502

    spans = spans_of(collector, CALLER_TRACE, PREDICT_ROUTE)
    call = client_span(collector, f"chat {Scenario(status=503).to_model()}")
    assert call.parent_span_id == spans[PREDICT_ROUTE].span_id
    assert call.attributes["error.type"] == "503" and call.status == "error"
    assert [(name, attributes) for name, attributes in call.events] == [
        ("mlstream.upstream.retry", {"http.response.status_code": 503, "mlstream.attempt": 2}),
        ("mlstream.upstream.retry", {"http.response.status_code": 503, "mlstream.attempt": 3})]
    attempts = [parsed_traceparent(r.headers["traceparent"]) for r in fake.stats.requests]
    assert attempts == [(CALLER_TRACE, call.span_id, True)] * 3
    request = spans[PREDICT_ROUTE]
    assert request.attributes["http.response.status_code"] == 502 and request.attributes["error.type"] == "502"
    assert request.status == "error"


def test_a_client_hang_up_ends_both_spans_and_the_client_span_says_client_gone(traced, collector, fake):
    server = traced()
    model_id = Client(server.url).model_for(openai_connector(fake, model=Scenario(chunks=200, delay_ms=20).to_model()))
    sock, reader = open_stream(server, model_id, headers=traceparent())
    reader.close()
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    spans = spans_of(collector, CALLER_TRACE, STREAM_ROUTE, f"chat {Scenario(chunks=200, delay_ms=20).to_model()}")
    call = spans[f"chat {Scenario(chunks=200, delay_ms=20).to_model()}"]
    assert call.attributes["error.type"] == "client_gone" and call.status == "error"
    assert "gen_ai.response.finish_reasons" not in call.attributes
    assert call.attributes["gen_ai.response.time_to_first_chunk"] > 0
    request = spans[STREAM_ROUTE]
    assert request.attributes["error.type"] == "client_gone" and request.attributes["http.response.status_code"] == 200
    # both ended when the stream did, long before the provider's 4 s answer would have
    assert (call.end_ns - call.start_ns) / 1e9 < 200 * 0.02
    assert fake.stats.wait_for(lambda s: s.client_disconnects >= 1, HANG_GUARD)


@pytest.mark.parametrize("knob, error_type, status", [
    ({"error_after": 2}, "stream", 200),   # an error event mid-stream: a final error event
    ({"cut_after": 2}, "connection", 200),  # the provider's connection cut before [DONE]
    ({"status": 429}, "429", 429),         # refused before any token: the provider's status
])
def test_a_failed_call_says_why(traced, collector, fake, knob, error_type, status):
    server = traced()
    scenario = Scenario(chunks=5, **knob)
    model_id = Client(server.url).model_for(openai_connector(fake, model=scenario.to_model()))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers=traceparent())
    assert response.status == status
    spans = spans_of(collector, CALLER_TRACE, STREAM_ROUTE, f"chat {scenario.to_model()}")
    call, request = spans[f"chat {scenario.to_model()}"], spans[STREAM_ROUTE]
    assert call.attributes["error.type"] == error_type and call.status == "error"
    assert request.attributes["http.response.status_code"] == status
    # a 4xx is the caller's, not the server's error; a failure after the 200 is the server's
    assert request.attributes.get("error.type") == (None if status == 429 else error_type)


def test_an_unsampled_caller_is_respected_and_still_propagated(traced, collector, fake):
    server = traced()
    model_id = Client(server.url).model_for(openai_connector(fake))
    unsampled = "1" * 32
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers=traceparent(unsampled, sampled=False))
    assert response.status == 200
    trace_id, _, sampled = parsed_traceparent(fake.stats.requests[-1].headers["traceparent"])
    assert (trace_id, sampled) == (unsampled, False)
    # a sampled request after it: once its spans are in, the first's would have been too
    raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                json.dumps(stream_body()).encode(), headers=traceparent())
    spans_of(collector, CALLER_TRACE, STREAM_ROUTE, "chat gpt-3.5-turbo")
    assert server.app.telemetry.flush()
    assert [s.name for s in collector.stats.spans if s.trace_id == unsampled] == []


def test_the_genai_metrics_with_the_conventions_buckets(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    for _ in range(2):
        response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                               json.dumps(stream_body(stream_options={"include_usage": True})).encode())
        assert response.status == 200
    call = client_span(collector, "chat gpt-3.5-turbo")
    assert collector.stats.wait_for(lambda s: len(s.named("chat gpt-3.5-turbo")) == 2, HANG_GUARD)
    assert server.app.telemetry.flush()
    metrics = {name: collector.stats.latest_points(name) for name in (
        "gen_ai.client.token.usage", "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk")}
    common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
              "gen_ai.request.model": "gpt-3.5-turbo", "gen_ai.response.model": "gpt-3.5-turbo",
              "server.address": "127.0.0.1", "server.port": fake.port}
    usage = {point.attributes["gen_ai.token.type"]: point for point in metrics["gen_ai.client.token.usage"]}
    assert set(usage) == {"input", "output"}
    for kind, point in usage.items():
        assert point.attributes == {**common, "gen_ai.token.type": kind}
        assert point.unit == "{token}" and point.bounds == TOKEN_BUCKETS and point.count == 2
        assert point.sum == 2 * call.attributes[f"gen_ai.usage.{kind}_tokens"]
        assert sum(point.bucket_counts) == 2
    for name in ("gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk"):
        [point] = metrics[name]
        assert point.attributes == common and point.unit == "s" and point.bounds == SECONDS_BUCKETS
        assert point.count == 2 and point.sum > 0


def test_a_failed_call_is_in_the_duration_metric_with_its_error_type(traced, collector, fake):
    server = traced()
    model_id = Client(server.url).model_for(openai_connector(fake, model=Scenario(status=429).to_model()))
    assert Client(server.url).call("POST", f"/_plugins/_ml/models/{model_id}/_predict", stream_body()).status == 429
    client_span(collector, f"chat {Scenario(status=429).to_model()}")
    assert server.app.telemetry.flush()
    [point] = collector.stats.latest_points("gen_ai.client.operation.duration")
    assert point.attributes["error.type"] == "429" and point.count == 1
    assert collector.stats.latest_points("gen_ai.client.token.usage") == []
    assert collector.stats.latest_points("gen_ai.client.operation.time_to_first_chunk") == []  # not a stream


def test_prompts_and_answers_are_recorded_only_when_asked(traced, collector, fake):
    server = traced(otel_capture_content=True)
    model_id = Client(server.url).model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers=traceparent())
    assert response.status == 200
    call = spans_of(collector, CALLER_TRACE, "chat gpt-3.5-turbo")["chat gpt-3.5-turbo"]
    assert json.loads(call.attributes["gen_ai.input.messages"]) == [
        {"role": message["role"], "parts": [{"type": "text", "content": message["content"]}]}
        for message in SEED_MESSAGES]
    assert json.loads(call.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": DEFAULT_TEXT}], "finish_reason": "stop"}]


def test_a_bedrock_call_signs_its_traceparent_and_names_the_model_id(traced, collector):
    server = traced()
    client = Client(server.url)
    with FakeBedrock() as bedrock:
        model_id = client.model_for(bedrock_connector(bedrock))
        response = bedrock_stream(client, model_id)
        assert response.status == 200 and bedrock.stats.signature_failures == 0
        sent = bedrock.stats.requests[-1]
    call = client_span(collector, f"chat {BEDROCK_MODEL}")
    assert call.attributes["gen_ai.provider.name"] == "aws.bedrock"
    assert call.attributes["gen_ai.request.model"] == BEDROCK_MODEL
    assert call.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    # injected before signing: the signature covers it
    assert parsed_traceparent(sent.headers["traceparent"])[:2] == (call.trace_id, call.span_id)
    signed = sent.headers["authorization"].split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    assert "traceparent" in signed
    everything = all_values(call)
    assert bedrock.secret_key not in everything and "x-amz-security-token" not in everything.lower()


def test_without_an_endpoint_nothing_is_traced(make_server, fake):
    server = make_server()
    assert server.app.telemetry is None and server.http.telemetry is None
    model_id = Client(server.url).model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), headers=traceparent())
    assert response.status == 200
    assert "traceparent" not in fake.stats.requests[-1].headers


def test_tracing_does_not_change_what_the_client_gets(traced, make_server, fake: FakeOpenAI):
    plain, traced_server = make_server(), traced()
    answers = []
    for server in (plain, traced_server):
        model_id = Client(server.url).model_for(openai_connector(fake))
        answers.append(raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                                   json.dumps(stream_body()).encode()).events())
    assert answers[0] == answers[1]


@pytest.mark.slow
def test_each_worker_exports_its_own_and_the_standard_variables_are_honoured(tmp_path, collector):
    """``--workers 2``: every worker process sets up its own exporters (its own
    service.instance.id); the SDK's variables configure them, no flag needed."""
    process, url = start_serve(tmp_path / "data", "--workers", "2", env={
        "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_SERVICE_NAME": "gateway",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test", "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=k1"})
    try:
        def instances() -> set[str]:
            return {span.resource["service.instance.id"] for span in collector.stats.named("GET /healthz")}

        sent = 0
        for _ in range(8):  # rounds of new connections, which the kernel spreads over the workers
            for _ in range(8):
                assert Client(url).call("GET", "/healthz").status == 200
            sent += 8
            assert collector.stats.wait_for(lambda s: len(s.named("GET /healthz")) == sent, HANG_GUARD)
            if len(instances()) == 2:
                break
        assert len(instances()) == 2
    finally:
        stop_serve(process)
    span = collector.stats.named("GET /healthz")[0]
    assert span.resource["service.name"] == "gateway" and span.resource["deployment.environment.name"] == "test"
    exports = collector.stats.requests
    assert exports and all(export.headers.get("x-collector-key") == "k1" for export in exports)


def test_one_signal_can_be_turned_off_as_the_sdk_does(traced, collector, fake, monkeypatch):
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")  # a backend that takes traces only (Jaeger)
    server = traced()
    model_id = Client(server.url).model_for(openai_connector(fake))
    assert raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                       json.dumps(stream_body()).encode()).status == 200
    client_span(collector, "chat gpt-3.5-turbo")
    server.app.telemetry.flush()
    assert collector.stats.metric_exports == 0 and collector.stats.trace_exports > 0


@pytest.mark.parametrize("streamed", [False, True], ids=["predict", "stream"])
def test_each_target_a_router_tries_is_a_client_span_of_the_one_request(traced, collector, fake, streamed):
    server = traced()
    client = Client(server.url)
    failing = Scenario(status=503).to_model()
    with FakeOpenAI() as spare:
        bad = client.register(client.create_connector(openai_connector(fake, model=failing)), name="bad")
        good = client.register(client.create_connector(openai_connector(spare)), name="good")
        reply = client.call("POST", "/_plugins/_ml/models/_register?deploy=true", {
            "name": "router", "function_name": "remote", "routing": {"targets": [bad], "fallbacks": [good]}})
        router_id = reply.body["model_id"]
        suffix = "/_predict/stream" if streamed else "/_predict"
        response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{router_id}{suffix}",
                               json.dumps(stream_body()).encode(), headers=traceparent())
        assert response.status == 200, response.body
        served_traceparent = spare.stats.requests[-1].headers["traceparent"]
    route = STREAM_ROUTE if streamed else PREDICT_ROUTE
    spans = spans_of(collector, CALLER_TRACE, route, f"chat {failing}", "chat gpt-3.5-turbo")
    request, refused, served = spans[route], spans[f"chat {failing}"], spans["chat gpt-3.5-turbo"]
    assert request.attributes["mlstream.model.id"] == router_id and "error.type" not in request.attributes
    assert refused.parent_span_id == served.parent_span_id == request.span_id
    assert refused.attributes["error.type"] == "503" and "error.type" not in served.attributes
    assert parsed_traceparent(fake.stats.requests[-1].headers["traceparent"])[1] == refused.span_id
    assert parsed_traceparent(served_traceparent)[1] == served.span_id


# --- every route that calls a provider names it (issue 42) ------------------------------

COHERE_EMBED_BODY = ('{ "texts": ${parameters.texts}, "truncate": "END", "model": "${parameters.model}", '
                     '"input_type": "search_document" }')
USER_TURN = [{"role": "user", "content": "Who is Hamlet?"}]


class Providers:
    """The fakes a row of ``CALLING_ROUTES`` registers its model on, each started when first
    asked for, stopped at the end."""

    def __init__(self, stack: ExitStack, openai_fake: FakeOpenAI, bedrock_fake: FakeBedrock) -> None:
        self._stack = stack
        self.openai, self.bedrock = openai_fake, bedrock_fake
        self._anthropic: FakeAnthropic | None = None
        self._gemini: FakeGemini | None = None

    @property
    def anthropic(self) -> FakeAnthropic:
        if self._anthropic is None:
            self._anthropic = self._stack.enter_context(FakeAnthropic())
        return self._anthropic

    @property
    def gemini(self) -> FakeGemini:
        if self._gemini is None:
            self._gemini = self._stack.enter_context(FakeGemini())
        return self._gemini


def _completions(fakes: Providers) -> dict[str, Any]:
    connector = openai_connector(fakes.openai, model="gpt-3.5-turbo-instruct", path="/v1/completions")
    connector["actions"][0]["request_body"] = '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}" }'
    return connector


def _cohere(fakes: Providers) -> dict[str, Any]:
    # cohere_connector_embedding_blueprint.md, at the fake's Cohere API
    return {"name": "Cohere Embed Model", "description": "d", "version": "1", "protocol": "http",
            "credential": {"cohere_key": fakes.openai.api_key}, "parameters": {"model": "embed-english-v3.0"},
            "actions": [{"action_type": "predict", "method": "POST", "url": f"{fakes.openai.url}/v1/embed",
                         "headers": {"Authorization": "Bearer ${credential.cohere_key}"},
                         "request_body": COHERE_EMBED_BODY,
                         "pre_process_function": "connector.pre_process.cohere.embedding",
                         "post_process_function": "connector.post_process.cohere.embedding"}]}


# A model of each provider API, by the name the rows use: its connector at the fakes.
CONNECTORS: dict[str, Callable[[Providers], dict[str, Any]]] = {
    "openai chat": lambda fakes: openai_connector(fakes.openai),
    "openai completions": _completions,
    "openai embeddings": lambda fakes: openai_embedding_connector(fakes.openai),
    "cohere embed": _cohere,
    "bedrock converse": lambda fakes: bedrock_connector(fakes.bedrock),
    "bedrock titan": lambda fakes: titan_connector(fakes.bedrock),
    "anthropic messages": lambda fakes: fake_anthropic.connector(fakes.anthropic.url, fakes.anthropic.api_key),
    "gemini": lambda fakes: fake_gemini.connector(fakes.gemini.url, fakes.gemini.api_key),
}
ML = "/_plugins/_ml"
CHAT_PARAMETERS = {"parameters": {"messages": SEED_MESSAGES}}
# Every route that calls a provider, on each kind of model it serves differently: (the
# route's template, the model, the request's path ({id}: the model's id) and body, the
# CLIENT span's name, its gen_ai.provider.name). Against the fakes every host is
# 127.0.0.1: the provider is known from the connector, never from the host.
CALLING_ROUTES = [
    (f"{ML}/models/{{model_id}}/_predict", "openai chat", f"{ML}/models/{{id}}/_predict", CHAT_PARAMETERS,
     "chat gpt-3.5-turbo", "openai"),
    (f"{ML}/models/{{model_id}}/_predict", "openai embeddings", f"{ML}/models/{{id}}/_predict",
     {"text_docs": ["Who is Hamlet?"]}, "embeddings text-embedding-ada-002", "openai"),
    (f"{ML}/models/{{model_id}}/_predict", "bedrock titan", f"{ML}/models/{{id}}/_predict",
     {"text_docs": ["Who is Hamlet?"]}, "embeddings amazon.titan-embed-text-v1", "aws.bedrock"),
    (f"{ML}/_predict/{{algorithm}}/{{model_id}}", "cohere embed", f"{ML}/_predict/text_embedding/{{id}}",
     {"text_docs": ["Who is Hamlet?"]}, "embeddings embed-english-v3.0", "cohere"),
    (f"{ML}/models/{{model_id}}/_predict/stream", "openai chat", f"{ML}/models/{{id}}/_predict/stream",
     CHAT_PARAMETERS, "chat gpt-3.5-turbo", "openai"),
    (f"{ML}/models/{{model_id}}/_predict/stream", "bedrock converse", f"{ML}/models/{{id}}/_predict/stream",
     {"parameters": {"inputs": "Who is Hamlet?"}}, f"chat {BEDROCK_MODEL}", "aws.bedrock"),
    ("/v1/chat/completions", "openai chat", "/v1/chat/completions", {"messages": USER_TURN},
     "chat gpt-3.5-turbo", "openai"),
    ("/v1/chat/completions", "openai chat", "/v1/chat/completions", {"messages": USER_TURN, "stream": True},
     "chat gpt-3.5-turbo", "openai"),
    ("/v1/chat/completions", "gemini", "/v1/chat/completions", {"messages": USER_TURN},
     "generate_content gemini-2.5-flash", "gcp.gemini"),
    ("/v1/completions", "openai completions", "/v1/completions", {"prompt": "Who is Hamlet?"},
     "text_completion gpt-3.5-turbo-instruct", "openai"),
    ("/v1/embeddings", "openai embeddings", "/v1/embeddings", {"input": ["Who is Hamlet?"]},
     "embeddings text-embedding-ada-002", "openai"),
    ("/v1/embeddings", "bedrock titan", "/v1/embeddings", {"input": "Who is Hamlet?"},
     "embeddings amazon.titan-embed-text-v1", "aws.bedrock"),
    ("/v1/embeddings", "cohere embed", "/v1/embeddings", {"input": ["Who is Hamlet?"]},
     "embeddings embed-english-v3.0", "cohere"),
    ("/v1/responses", "openai chat", "/v1/responses", {"input": "Who is Hamlet?", "store": False},
     "chat gpt-3.5-turbo", "openai"),
    ("/v1/responses", "bedrock converse", "/v1/responses", {"input": "Who is Hamlet?", "store": False,
                                                           "stream": True}, f"chat {BEDROCK_MODEL}", "aws.bedrock"),
    ("/v1/messages", "anthropic messages", "/v1/messages", {"max_tokens": 50, "messages": USER_TURN},
     "chat claude-sonnet-4-5", "anthropic"),
    ("/v1/messages", "anthropic messages", "/v1/messages", {"max_tokens": 50, "messages": USER_TURN, "stream": True},
     "chat claude-sonnet-4-5", "anthropic"),
    ("/v1/messages", "openai chat", "/v1/messages", {"max_tokens": 50, "messages": USER_TURN},
     "chat gpt-3.5-turbo", "openai"),
]
# The POST routes of role user that call no provider (each of the others is in the table).
CALLING_NO_PROVIDER = {"/v1/messages/count_tokens", f"{ML}/models/_search", f"{ML}/model_groups/_search",
                       f"{ML}/tasks/_search", f"{ML}/memory", f"{ML}/memory/_search", f"{ML}/memory/{{memory_id}}/messages",
                       f"{ML}/memory/{{memory_id}}/_search", f"{ML}/agents/_search"}
# An agent's run, and an MCP server's tools/call, call their tools' models through the same
# code: the agent's own test below (it needs an agent, not a model).
CALLING_AGENTS = {f"{ML}/agents/{{agent_id}}/_execute", f"{ML}/mcp"}
# Batch job control: a job's submission and cancel reach the provider's batch API, not a
# model, so they make no gen_ai span (their usage records say who made them).
CALLING_UNTRACED = {f"{ML}/models/{{model_id}}/_batch_predict", f"{ML}/tasks/{{task_id}}/_cancel",
                    f"{ML}/tasks/{{task_id}}/_cancel_batch"}


@pytest.mark.parametrize("route, model, path, body, span_name, provider", CALLING_ROUTES,
                         ids=[f"{path.removeprefix(ML)}-{model}" + ("-stream" if body.get("stream") else "")
                              for _, model, path, body, _, _ in CALLING_ROUTES])
def test_every_route_names_the_provider_of_its_client_span(traced, collector, fake, bedrock, route, model, path,
                                                           body, span_name, provider):
    server = traced()
    client = Client(server.url)
    with ExitStack() as stack:
        model_id = client.model_for(CONNECTORS[model](Providers(stack, fake, bedrock)))
        if path.startswith("/v1/"):
            body = {"model": model_id, **body}
        response = raw_request(server.url, "POST", path.replace("{id}", model_id), json.dumps(body).encode(),
                               headers=traceparent())
        assert response.status == 200, response.body
    spans = spans_of(collector, CALLER_TRACE, f"POST {route}", span_name)
    request, call = spans[f"POST {route}"], spans[span_name]
    assert request.attributes["http.route"] == route and call.parent_span_id == request.span_id
    assert call.kind == "client" and call.attributes["gen_ai.provider.name"] == provider


def test_the_table_of_calling_routes_has_every_route_that_may_call_a_provider(traced):
    router = traced().app.router
    table = getattr(router, "routes", None) or router._routes
    calling = {route.template for route in table if route.method == "POST" and route.role == "user"}
    assert calling - CALLING_NO_PROVIDER - CALLING_UNTRACED - CALLING_AGENTS == {row[0] for row in CALLING_ROUTES}


def test_an_agents_tool_calls_are_spans_under_its_request(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    agent = {"name": "traced", "type": "flow", "tools": [
        {"type": "MLModelTool", "name": "first", "parameters": {"model_id": model_id, "messages": json.dumps(
            SEED_MESSAGES)}},
        {"type": "MLModelTool", "name": "second", "parameters": {"model_id": model_id, "messages": json.dumps(
            SEED_MESSAGES)}}]}
    agent_id = client.ok("POST", f"{ML}/agents/_register", agent)["agent_id"]
    response = raw_request(server.url, "POST", f"{ML}/agents/{agent_id}/_execute",
                           json.dumps({"parameters": {"question": "q"}}).encode(), headers=traceparent())
    assert response.status == 200, response.body
    route = f"POST {ML}/agents/{{agent_id}}/_execute"
    spans_of(collector, CALLER_TRACE, route, "chat gpt-3.5-turbo")

    def both(stats: Any) -> bool:
        return sum(1 for s in stats.spans if s.trace_id == CALLER_TRACE and s.name == "chat gpt-3.5-turbo") == 2
    assert collector.stats.wait_for(both, HANG_GUARD)
    request = next(s for s in collector.stats.spans if s.trace_id == CALLER_TRACE and s.name == route)
    calls = [s for s in collector.stats.spans if s.trace_id == CALLER_TRACE and s.name == "chat gpt-3.5-turbo"]
    assert all(call.parent_span_id == request.span_id and call.kind == "client" for call in calls)


def test_a_semantic_caches_embedding_is_a_span_under_its_request(traced, collector, fake):
    server = traced()
    client = Client(server.url)
    embedding = openai_embedding_connector(fake)
    embedding["parameters"]["model"] = "bag-of-words-1"
    embedder = client.model_for(embedding)
    chat = client.ok("POST", "/_plugins/_ml/models/_register?deploy=true", {
        "name": "semantic", "function_name": "remote", "connector": openai_connector(fake),
        "cache": {"mode": "semantic", "embedding_model": embedder}})["model_id"]
    body = {"model": chat, "messages": USER_TURN}
    response = raw_request(server.url, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                           headers=traceparent())
    assert response.status == 200, response.body
    spans = spans_of(collector, CALLER_TRACE, "POST /v1/chat/completions", "embeddings bag-of-words-1",
                     "chat gpt-3.5-turbo")
    request = spans["POST /v1/chat/completions"]
    assert spans["embeddings bag-of-words-1"].parent_span_id == request.span_id
    assert spans["chat gpt-3.5-turbo"].parent_span_id == request.span_id
