"""The seed's walk-through and the stream's wire contract, over real sockets."""

from __future__ import annotations

import json
import socket

import pytest

from mlstream.testing.fake_openai import DEFAULT_TEXT, Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, open_stream, post_stream, stream_body
from ..support.timeouts import HANG_GUARD
from ..support.wire import raw_request, read_response


def dataasmap(event: dict) -> dict:
    return event["inference_results"][0]["output"][0]["dataAsMap"]


def test_seed_walkthrough_four_steps(server, fake):
    client = Client(server.url)
    # 1. the seed's connector, verbatim but for the endpoint
    connector_id = client.create_connector(openai_connector(fake))
    # 2. register with ?deploy=true
    registered = client.ok("POST", "/_plugins/_ml/models/_register?deploy=true", {
        "name": "openai gpt 3.5 turbo", "function_name": "remote",
        "description": "openai model", "connector_id": connector_id})
    assert registered["status"] == "CREATED" and registered["task_id"]
    model_id = registered["model_id"]
    assert client.ok("GET", f"/_plugins/_ml/models/{model_id}")["model_state"] == "DEPLOYED"

    # 3. stream, with a chunked request body as the seed's curl sends it
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode(), chunked_request=True)
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["cache-control"] == "no-cache"
    assert response.complete
    events = response.events()
    # one SSE event per HTTP chunk, each exactly "data: <json>\n\n"
    assert len(response.chunks) == len(events)
    assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") and c.count(b"\n") == 2 for c in response.chunks)
    for event in events:
        assert set(event) == {"inference_results"}
        assert set(event["inference_results"][0]) == {"output"}
        assert event["inference_results"][0]["output"][0]["name"] == "response"
    maps = [dataasmap(event) for event in events]
    assert [m["is_last"] for m in maps].count(True) == 1 and maps[-1]["is_last"] is True
    assert maps[-1]["content"] == ""
    assert maps[-1]["finish_reason"] == "stop"
    assert all(set(m) == {"content", "is_last"} for m in maps[:-1])
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT
    assert len(maps) - 1 == len(fake_tokens(Scenario()))
    sent = fake.stats.requests[-1]
    assert sent.body["stream"] is True and sent.body["messages"] == SEED_MESSAGES
    assert "stream_options" not in sent.body

    # 4. non-stream predict: the whole upstream answer in the inference_results shape
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                      {"parameters": {"messages": SEED_MESSAGES}})
    result = whole["inference_results"][0]
    assert result["status_code"] == 200
    assert result["output"][0]["name"] == "response"
    answer = result["output"][0]["dataAsMap"]
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == DEFAULT_TEXT


def test_usage_and_finish_reason_when_the_caller_asks(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body(stream_options={"include_usage": True})).encode())
    last = dataasmap(response.events()[-1])
    assert last["is_last"] is True and last["finish_reason"] == "stop"
    # usage under OpenAI's own names, as the non-stream answer carries it
    assert set(last["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}, last["usage"]
    assert last["usage"]["completion_tokens"] == len(fake_tokens(Scenario()))
    assert last["usage"]["prompt_tokens"] > 0
    assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    assert fake.stats.requests[-1].body["stream_options"] == {"include_usage": True}
    # the same request without streaming: the same usage object
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
    assert whole["inference_results"][0]["output"][0]["dataAsMap"]["usage"] == last["usage"]


def test_many_chunks_arrive_whole_and_in_order(server, fake):
    client = Client(server.url)
    scenario = Scenario(chunks=500)
    model_id = client.model_for(openai_connector(fake, model=scenario.to_model()))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    maps = [dataasmap(e) for e in response.events()]
    assert [m["content"] for m in maps[:-1]] == fake_tokens(scenario)
    assert maps[-1]["is_last"] is True


def test_legacy_text_completions_stream(server, fake):
    client = Client(server.url)
    connector = openai_connector(fake, path="/v1/completions")
    connector["actions"][0]["request_body"] = '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}" }'
    model_id = client.model_for(connector)
    body = {"parameters": {"prompt": "Hamlet?", "_llm_interface": " OpenAI/v1/Completions "}}
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(body).encode())
    assert response.status == 200 and response.complete
    maps = [dataasmap(e) for e in response.events()]
    assert [m["content"] for m in maps[:-1]] == fake_tokens(Scenario())
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT and maps[-1]["is_last"]
    [sent] = fake.stats.requests
    assert (sent.method, sent.path) == ("POST", "/v1/completions")
    assert sent.body == {"model": "gpt-3.5-turbo", "prompt": "Hamlet?", "stream": True}


# The connector's URL names the interface when _llm_interface is absent. The request the
# provider gets is the same either way; what differs is where the decoder looks for the
# text (choices[0].delta.content vs choices[0].text). A wrong guess therefore still
# streams a 200 ending in is_last, only with no text: the test must check the text.
INFERRED = {
    "chat": ("/v1/chat/completions",
             '{ "model": "${parameters.model}", "messages": ${parameters.messages} }',
             {"messages": SEED_MESSAGES}),
    "completions": ("/v1/completions",
                    '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}" }',
                    {"prompt": "Hamlet?"}),
}


@pytest.mark.parametrize("kind", sorted(INFERRED))
def test_interface_inferred_from_the_connector_url(server, fake, kind):
    path, request_body, parameters = INFERRED[kind]
    client = Client(server.url)
    connector = openai_connector(fake, path=path)
    connector["actions"][0]["request_body"] = request_body
    model_id = client.model_for(connector)
    assert "_llm_interface" not in parameters
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps({"parameters": parameters}).encode())
    assert response.status == 200 and response.complete
    # What reached the provider: one streamed request on the connector's route.
    [sent] = fake.stats.requests
    assert (sent.method, sent.path) == ("POST", path)
    assert sent.body == {"model": "gpt-3.5-turbo", **parameters, "stream": True}
    # the fake counts its stream completed after its last write, which the client may read first
    assert fake.stats.wait_for(lambda s: s.streams_completed == 1, HANG_GUARD)
    # What came back: every token the fake sent, in order, then the last event.
    maps = [dataasmap(e) for e in response.events()]
    assert [m["content"] for m in maps[:-1]] == fake_tokens(Scenario())
    assert "".join(m["content"] for m in maps) == DEFAULT_TEXT
    assert maps[-1] == {"content": "", "is_last": True, "finish_reason": "stop"}


def test_unknown_interface_is_a_400(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                        stream_body(_llm_interface="cohere/v1/chat"))
    assert reply.status == 400 and "cohere/v1/chat" in reply.body["error"]["reason"]
    assert fake.stats.requests == []


def test_response_filter_on_predict(server, fake):
    client = Client(server.url)
    connector = openai_connector(fake)
    connector["parameters"]["response_filter"] = "$.choices[0].message.content"
    model_id = client.model_for(connector)
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
    assert whole["inference_results"][0]["output"][0]["dataAsMap"] == {"response": DEFAULT_TEXT}
    # a request parameter overrides the connector's
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                      {"parameters": {"messages": SEED_MESSAGES, "response_filter": "$.usage"}})
    assert set(whole["inference_results"][0]["output"][0]["dataAsMap"]) >= {"prompt_tokens", "completion_tokens"}


def test_a_bad_response_filter_is_refused_before_the_provider_is_called(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    for response_filter in (["$.usage"], 7, "$[", "usage[?"):
        reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                            {"parameters": {"messages": SEED_MESSAGES, "response_filter": response_filter}})
        assert reply.status == 400, (response_filter, reply.body)
        assert "[response_filter]" in reply.body["error"]["reason"], reply.body
    assert fake.stats.requests == []


# --- failures: a proper status before the first byte, a final error event after ----------

def test_upstream_401_before_any_byte_is_a_401_json(server, fake):
    client = Client(server.url)
    connector = openai_connector(fake)
    connector["credential"]["openAI_key"] = "sk-wrong-key-0123456789abcdef"
    model_id = client.model_for(connector)
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert response.status == 401
    assert response.headers["content-type"].startswith("application/json")
    body = json.loads(response.body)
    assert body["status"] == 401 and body["error"]["type"]
    assert b"sk-wrong-key" not in response.body


def test_upstream_unreachable_is_a_502(make_server, fake):
    server = make_server()
    client = Client(server.url)
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    connector = openai_connector(fake)
    connector["parameters"]["endpoint"] = f"127.0.0.1:{port}"
    model_id = client.model_for(connector)
    for route in ("_predict/stream", "_predict"):
        reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/{route}", stream_body())
        assert reply.status == 502, reply.body
        assert "could not connect" in reply.body["error"]["reason"]
    assert 'mlstream_upstream_errors_total{status="connection"} 2' in client.call("GET", "/metrics").body


def test_upstream_5xx_is_a_502_naming_the_status_and_429_keeps_retry_after(server, fake):
    client = Client(server.url)
    failing = client.model_for(openai_connector(fake, model=Scenario(status=503).to_model()))
    reply = client.call("POST", f"/_plugins/_ml/models/{failing}/_predict/stream", stream_body())
    assert reply.status == 502 and "503" in reply.body["error"]["reason"]
    limited = client.model_for(openai_connector(fake, model=Scenario(status=429, retry_after=7).to_model()))
    reply = client.call("POST", f"/_plugins/_ml/models/{limited}/_predict/stream", stream_body())
    assert reply.status == 429 and reply.headers["Retry-After"] == "7"


def test_provider_cut_mid_stream_ends_with_an_error_event(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=10, cut_after=4).to_model()))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert response.status == 200 and response.complete
    events = response.events()
    assert [dataasmap(e)["content"] for e in events[:-1]] == fake_tokens(Scenario(chunks=10))[:4]
    assert set(events[-1]) == {"error"}
    assert not any(dataasmap(e)["is_last"] for e in events[:-1])


def test_provider_error_event_mid_stream_is_passed_on(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=10, error_after=3).to_model()))
    response = raw_request(server.url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    events = response.events()
    assert len(events) == 4 and "fake mid-stream failure" in events[-1]["error"]
    assert response.complete


# --- the pool: admission and release --------------------------------------------------------

def test_readers_a_backlog_behind_refuse_new_streams_at_once_with_429(make_server, fake):
    # One worker, no backlog. A gzip-coded stream cannot be read without blocking, so
    # a worker waits on it for its life (the path every compressed body takes): the one
    # worker is busy, a plain stream's next slice waits for it, and a new stream is refused.
    server = make_server(stream_workers=1, stream_backlog=0)
    client = Client(server.url)
    held = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=200, gzip=1).to_model()))
    plain = client.model_for(openai_connector(fake, model=Scenario(chunks=50, delay_ms=20).to_model()))
    held_sock, held_reader = open_stream(server, held)
    assert server.app.pool.wait_until(lambda pool: pool.running == 1, HANG_GUARD)
    waiting = post_stream(server.url, plain)
    try:
        assert server.app.pool.wait_until(lambda pool: pool.queued == 1, HANG_GUARD)
        reply = client.call("POST", f"/_plugins/_ml/models/{plain}/_predict/stream", stream_body())
        assert reply.status == 429
        assert int(reply.headers["Retry-After"]) >= 1
        assert reply.body["error"]["type"] == "rejected_execution_exception"
        assert "mlstream_streams_rejected_total 1" in client.call("GET", "/metrics").body
    finally:
        held_reader.close()
        held_sock.close()
    # the worker comes back: the waiting stream goes on to its end, a new one is admitted
    with waiting, waiting.makefile("rb") as reader:
        response = read_response(reader)
    assert response.status == 200 and response.complete
    assert server.app.pool.wait_idle(HANG_GUARD)
    sock, reader = open_stream(server, plain)
    reader.close()
    sock.close()


def test_many_paced_streams_hold_no_worker_while_they_wait(make_server, fake):
    # Two workers and 200 live streams, each pausing between chunks: between their
    # bytes they wait on the watcher, so all are live at once and none waits to start.
    # Each lasts 3 s, so the first is still live when the last is opened (200 connections
    # took 0.7 s on a loaded 2-core machine: streams of 0.5 s ended before it).
    count = 200
    server = make_server(stream_workers=2)
    client = Client(server.url)
    scenario = Scenario(chunks=30, delay_ms=100)
    model_id = client.model_for(openai_connector(fake, model=scenario.to_model()))
    socks = [post_stream(server.url, model_id) for _ in range(count)]
    try:
        assert server.app.pool.wait_until(lambda pool: pool.active == count, HANG_GUARD)
        assert server.app.pool.rejected == 0
        expected = "".join(fake_tokens(scenario))
        for sock in socks:
            with sock.makefile("rb") as reader:
                response = read_response(reader)
                assert response.complete
                assert "".join(dataasmap(event)["content"] for event in response.events()[:-1]) == expected
    finally:
        for sock in socks:
            sock.close()
    assert server.app.pool.wait_idle(HANG_GUARD)


def test_client_disconnect_frees_the_worker_and_closes_the_upstream(make_server, fake):
    server = make_server(stream_workers=2)
    client = Client(server.url)
    slow = client.model_for(openai_connector(fake, model=Scenario(chunks=1000, delay_ms=50).to_model()))
    sock, reader = open_stream(server, slow)
    assert server.app.pool.active == 1
    reader.close()  # the file object holds the socket open until it is closed too
    sock.close()
    # the fake sees its client (our reader) go away, and the worker is free again
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
    assert server.app.pool.wait_idle(HANG_GUARD)
    assert fake.stats.streams_completed == 0
    assert server.app.in_flight.wait_idle(HANG_GUARD)  # the handler has finished too
    assert server.app.in_flight.streams == 0
