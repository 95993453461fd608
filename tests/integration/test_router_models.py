"""Router models over real sockets: a model with ``routing`` and no connector serves each
call from one of its targets (fake providers on loopback), moving on when one fails
before answering, never after the first token; weights, least busy, cooldowns; what the
answer, the stream, the usage records and the metrics say about who served; the checks
at register and update time; every front."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mlstream.testing.fake_openai import FakeOpenAI, Scenario

from ..support.clients import Client
from ..support.connectors import bedrock_connector, closed_port, maps, openai_connector
from ..support.openai_sdk import sdk
from ..support.streams import open_stream, stream_body
from ..support.timeouts import HANG_GUARD, poll_until
from ..support.wire import raw_request

REGISTER = "/_plugins/_ml/models/_register?deploy=true"
PREDICT = "/_plugins/_ml/models/{}/_predict"
STREAM = "/_plugins/_ml/models/{}/_predict/stream"
SERVED_BY = "x-mlstream-model-id"


@pytest.fixture
def spare() -> Any:
    """A second fake OpenAI: each target its own provider, so each one's requests are counted."""
    with FakeOpenAI() as provider:
        yield provider


def target(client: Client, fake: FakeOpenAI, name: str, *, endpoint: str | None = None,
           client_config: dict[str, Any] | None = None, **scenario: Any) -> str:
    """A plain OpenAI chat model on ``fake``, answering as ``scenario`` says."""
    connector = openai_connector(fake, model=Scenario(**scenario).to_model() if scenario else "gpt-3.5-turbo")
    if endpoint is not None:
        connector["parameters"]["endpoint"] = endpoint
    if client_config is not None:
        connector["client_config"] = client_config
    return client.register(client.create_connector(connector), name=name)


def register_router(client: Client, name: str = "router", **routing: Any) -> Any:
    return client.call("POST", REGISTER, {"name": name, "function_name": "remote", "routing": routing})


def router(client: Client, **routing: Any) -> str:
    reply = register_router(client, **routing)
    assert reply.status == 200, reply.body
    return reply.body["model_id"]


def predict(client: Client, model_id: str) -> Any:
    return client.call("POST", PREDICT.format(model_id), {"parameters": {"messages": [
        {"role": "user", "content": "hello"}]}})


def stream(server: Any, model_id: str) -> Any:
    return raw_request(server.url, "POST", STREAM.format(model_id), json.dumps(stream_body()).encode())


def requests_to(fake: Any) -> int:
    return len(fake.stats.requests)


# --- the first target fails before answering: the next one serves --------------------------

FAILURES = {
    "429": dict(status=429),
    "500": dict(status=500),
    "503": dict(status=503),
    "refused": dict(),          # (an endpoint nothing listens on)
    "silent": dict(first_delay_ms=5_000),
}


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("streamed", [False, True], ids=["predict", "stream"])
def test_a_failing_first_target_is_served_by_the_next(server, client, fake, spare, failure, streamed):
    bad = target(client, fake, "bad", endpoint=closed_port() if failure == "refused" else None,
                 client_config={"read_timeout": 1}, **FAILURES[failure])
    good = target(client, spare, "good")
    router_id = router(client, targets=[bad], fallbacks=[good])
    if streamed:
        response = stream(server, router_id)
        assert response.status == 200 and response.complete, response.body
        events = maps(response)
        assert "".join(e["content"] for e in events) and events[-1]["is_last"] is True
        assert events[-1]["model_id"] == good
        served_by = response.headers[SERVED_BY]
    else:
        reply = predict(client, router_id)
        assert reply.status == 200, reply.body
        assert reply.body["inference_results"][0]["output"][0]["dataAsMap"]["choices"]
        served_by = reply.headers[SERVED_BY]
    assert served_by == good
    assert requests_to(spare) == 1
    assert requests_to(fake) == (0 if failure == "refused" else 1)


def test_a_plain_model_carries_no_served_by_header(server, client, fake):
    model_id = target(client, fake, "plain")
    assert SERVED_BY not in predict(client, model_id).headers
    assert SERVED_BY not in stream(server, model_id).headers


def test_the_request_own_fault_is_answered_at_once(client, fake, spare):
    for status in (400, 401, 404, 422):
        bad = target(client, fake, f"bad-{status}", status=status)
        good = target(client, spare, "good")
        reply = predict(client, router(client, name=f"r-{status}", targets=[bad], fallbacks=[good]))
        assert reply.status == status, reply.body
    assert requests_to(spare) == 0


def test_no_switch_once_a_token_was_relayed(server, client, fake, spare):
    bad = target(client, fake, "bad", chunks=6, error_after=2)
    good = target(client, spare, "good")
    response = stream(server, router(client, targets=[bad], fallbacks=[good]))
    assert response.status == 200 and response.headers[SERVED_BY] == bad
    events = response.events()
    assert "error" in events[-1] and len(events) == 3  # two tokens, then the error: no other target
    assert requests_to(spare) == 0


def test_every_target_failing_answers_the_last_error_listing_each_attempt(server, client, fake, spare):
    first = target(client, fake, "first", status=500)
    second = target(client, spare, "second", status=503)
    router_id = router(client, targets=[first], fallbacks=[second])
    reply = predict(client, router_id)
    assert reply.status == 502, reply.body
    reason = reply.body["error"]["reason"]
    assert "status 503" in reason and f"router {router_id} tried: {first}: " in reason and "status 500" in reason
    response = stream(server, router_id)
    assert response.status == 502 and f"{first}: " in json.loads(response.body)["error"]["reason"]


# --- choosing ------------------------------------------------------------------------------

def test_weights_share_the_calls_in_proportion(client, fake, spare):
    heavy, light = target(client, fake, "heavy"), target(client, spare, "light")
    router_id = router(client, strategy="weighted", targets=[{"model_id": heavy, "weight": 3},
                                                             {"model_id": light, "weight": 1}])
    served = [predict(client, router_id).headers[SERVED_BY] for _ in range(40)]
    assert served.count(heavy) == 30 and served.count(light) == 10
    assert (requests_to(fake), requests_to(spare)) == (30, 10)


def test_round_robin_alternates(client, fake, spare):
    a, b = target(client, fake, "a"), target(client, spare, "b")
    router_id = router(client, targets=[a, b])
    assert [predict(client, router_id).headers[SERVED_BY] for _ in range(4)] == [a, b, a, b]


def test_least_busy_goes_where_fewer_streams_are_open(server, client, fake, spare):
    a = target(client, fake, "a", chunks=50, delay_ms=50)
    b = target(client, spare, "b", chunks=50, delay_ms=50)
    router_id = router(client, strategy="least_busy", targets=[a, b])
    sock, _ = open_stream(server, router_id)  # to a: both idle, a is listed first
    try:
        assert fake.stats.wait_for(lambda s: s.requests_in_flight == 1, HANG_GUARD)
        assert predict(client, router_id).headers[SERVED_BY] == b
    finally:
        sock.close()


def test_a_failing_target_cools_down_then_is_tried_again(client, fake, spare):
    bad = target(client, fake, "bad", status=500)
    good = target(client, spare, "good")
    router_id = router(client, targets=[bad], fallbacks=[good], allowed_fails=2, cooldown_s=0.3)
    assert predict(client, router_id).headers[SERVED_BY] == good
    cooled = time.monotonic()  # before the second failure, which starts the cooldown
    assert predict(client, router_id).headers[SERVED_BY] == good
    assert requests_to(fake) == 2
    assert predict(client, router_id).headers[SERVED_BY] == good
    assert requests_to(fake) == 2  # skipped while cooling
    deadline = cooled + HANG_GUARD
    while requests_to(fake) == 2 and time.monotonic() < deadline:  # bounded: each turn is a call
        predict(client, router_id)
    assert requests_to(fake) == 3 and time.monotonic() - cooled >= 0.3


# --- who served, where it is seen --------------------------------------------------------

def test_usage_records_and_metrics_name_the_target(server, client, fake, spare):
    bad = target(client, fake, "bad", status=429)
    good = target(client, spare, "good")
    router_id = router(client, targets=[bad], fallbacks=[good])
    assert predict(client, router_id).status == 200
    assert stream(server, router_id).status == 200
    records = client.ok("GET", "/_plugins/_mlstream/usage/records?size=10")["records"]
    assert [r["model"] for r in records] == [good, good]
    metrics = client.call("GET", "/metrics").body
    assert f'mlstream_routing_attempts_total{{router="{router_id}",target="{bad}",outcome="failed"}} 2' in metrics
    assert f'mlstream_routing_attempts_total{{router="{router_id}",target="{good}",outcome="served"}} 2' in metrics


# --- register and update -------------------------------------------------------------------

def test_register_and_update_check_the_routing(client, fake, bedrock):
    plain = target(client, fake, "plain")
    missing = register_router(client, targets=[plain, "no-such-model"])
    assert missing.status == 404 and "no-such-model" in missing.body["error"]["reason"]
    assert register_router(client, targets=[plain], fallbacks=["gone"]).status == 404
    assert register_router(client, targets=[]).status == 400
    assert register_router(client, strategy="fastest", targets=[plain]).status == 400
    with_connector = client.call("POST", REGISTER, {"name": "r", "function_name": "remote",
                                                    "connector_id": "x", "routing": {"targets": [plain]}})
    assert with_connector.status == 400 and "has no [connector_id]" in with_connector.body["error"]["reason"]

    first = router(client, name="first", targets=[plain])
    second = router(client, name="second", targets=[first])
    cycle = client.call("PUT", f"/_plugins/_ml/models/{first}", {"routing": {"targets": [second]}})
    assert cycle.status == 400 and f"{first} -> {second} -> {first}" in cycle.body["error"]["reason"]
    selfish = client.call("PUT", f"/_plugins/_ml/models/{first}", {"routing": {"targets": [first]}})
    assert selfish.status == 400
    assert client.call("PUT", f"/_plugins/_ml/models/{plain}", {"routing": {"targets": [first]}}).status == 400
    assert client.ok("GET", f"/_plugins/_ml/models/{first}")["routing"]["targets"] == [{"model_id": plain,
                                                                                         "weight": 1}]
    updated = client.call("PUT", f"/_plugins/_ml/models/{second}",
                          {"routing": {"strategy": "weighted", "targets": [plain]}})
    assert updated.status == 200
    assert client.ok("GET", f"/_plugins/_ml/models/{second}")["routing"]["strategy"] == "weighted"

    connector = openai_connector(fake)
    connector["parameters"]["_llm_interface"] = "openai/v1/chat/completions"
    openai_model = client.register(client.create_connector(connector), name="openai")
    bedrock_side = bedrock_connector(bedrock)
    bedrock_side["parameters"]["_llm_interface"] = "bedrock/converse/claude"
    bedrock_model = client.register(client.create_connector(bedrock_side), name="bedrock")
    mixed = register_router(client, name="mixed", targets=[openai_model, bedrock_model])
    assert mixed.status == 400 and "different provider APIs" in mixed.body["error"]["reason"]
    allowed = router(client, name="mixed", targets=[openai_model, bedrock_model], mixed_providers=True)
    refused = predict(client, allowed)
    assert refused.status == 400 and "through /v1" in refused.body["error"]["reason"]


# --- the /v1 fronts ---------------------------------------------------------------------------

def test_a_router_mixing_providers_through_the_openai_sdk(server, client, fake, bedrock):
    down = target(client, fake, "openai-down", status=500)
    bedrock_model = client.register(client.create_connector(bedrock_connector(bedrock)), name="bedrock")
    router_id = router(client, name="chat", targets=[down], fallbacks=[bedrock_model], mixed_providers=True)
    openai = sdk(server)
    raw = openai.chat.completions.with_raw_response.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers[SERVED_BY] == bedrock_model and raw.parse().choices[0].message.content
    chunks = list(openai.chat.completions.create(model=router_id, messages=[{"role": "user", "content": "hi"}],
                                                 stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].choices[0].finish_reason == "stop"
    assert router_id in [m.id for m in openai.models.list().data]
    assert requests_to(fake) == 2


def test_the_anthropic_and_responses_fronts_route_too(server, client, fake, spare):
    down = target(client, fake, "down", status=503)
    good = target(client, spare, "good")
    router_id = router(client, targets=[down], fallbacks=[good])
    messages = raw_request(server.url, "POST", "/v1/messages", json.dumps({
        "model": router_id, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}).encode())
    assert messages.status == 200 and messages.headers[SERVED_BY] == good
    assert json.loads(messages.body)["content"][0]["text"]
    responses = raw_request(server.url, "POST", "/v1/responses", json.dumps({
        "model": router_id, "input": "hi", "stream": True}).encode())
    assert responses.status == 200 and responses.headers[SERVED_BY] == good
    assert b"event: response.completed" in responses.body


def test_a_deleted_or_disabled_target_is_skipped(client, fake, spare):
    gone = target(client, fake, "gone")
    off = target(client, fake, "off")
    good = target(client, spare, "good")
    router_id = router(client, targets=[gone, off], fallbacks=[good])
    assert client.call("POST", f"/_plugins/_ml/models/{gone}/_undeploy").status == 200
    assert client.call("DELETE", f"/_plugins/_ml/models/{gone}").status == 200
    assert client.call("PUT", f"/_plugins/_ml/models/{off}", {"is_enabled": False}).status == 200
    reply = predict(client, router_id)
    assert reply.status == 200 and reply.headers[SERVED_BY] == good
    assert requests_to(fake) == 0
    metrics = client.call("GET", "/metrics").body
    assert f'target="{gone}",outcome="unavailable"' in metrics and f'target="{off}",outcome="unavailable"' in metrics


def test_the_access_log_names_the_target(client, fake, spare, caplog):
    caplog.set_level("INFO", logger="mlstream.access")
    bad = target(client, fake, "bad", status=500)
    good = target(client, spare, "good")
    router_id = router(client, targets=[bad], fallbacks=[good])
    assert predict(client, router_id).status == 200

    def access_lines() -> list:
        return [r for r in caplog.records if r.name == "mlstream.access" and "_predict" in r.getMessage()]
    assert poll_until(lambda: access_lines(), HANG_GUARD)  # written once the answer has gone
    lines = access_lines()
    assert len(lines) == 1
    assert f"model={router_id} target={good}" in lines[0].getMessage() and lines[0].access["target"] == good
