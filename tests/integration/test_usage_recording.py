"""Every provider call the request path makes is recorded, as the provider counted it.

Each test calls a route over a real socket against a fake provider and reads the usage
records back through ``GET /_plugins/_mlstream/usage/records``: the tokens recorded are
the ones the provider reported (the stream's last event, or the whole answer, shows
what it sent); without the provider's counts they are estimated; a hang-up, a failure,
a budget and the rpm/tpm limits are seen in the records and the answers.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mlstream.access.keys import KeyStore
from mlstream.testing import fake_anthropic, fake_gemini, fake_sagemaker
from mlstream.testing.fake_anthropic import FakeAnthropic
from mlstream.testing.fake_gemini import FakeGemini
from mlstream.testing.fake_openai import Scenario
from mlstream.testing.fake_sagemaker import FakeSageMaker
from mlstream.testing.scripted import fake_tokens
from mlstream.usage.tokens import answer_tokens, token_counts
from mlstream.usage.records import KeyLimits

from ..support.clients import Client, bearer, client_with
from ..support.connectors import bedrock_connector, maps, openai_connector, openai_embedding_connector
from ..support.streams import SEED_MESSAGES, post_stream, stream_body
from ..support.timeouts import HANG_GUARD, poll_until
from ..support.wire import raw_request

RECORDS = "/_plugins/_mlstream/usage/records?size=1000"
STREAM = "/_plugins/_ml/models/{}/_predict/stream"
PREDICT = "/_plugins/_ml/models/{}/_predict"


def records(client: Client) -> list[dict[str, Any]]:
    """Every record, oldest first."""
    return list(reversed(client.ok("GET", RECORDS)["records"]))


def only_record(client: Client) -> dict[str, Any]:
    found = records(client)
    assert len(found) == 1, found
    return found[0]


def counted(record: dict[str, Any]) -> tuple[int, int, int]:
    return record["input_tokens"], record["output_tokens"], record["cached_input_tokens"]


def expected(usage: Any) -> tuple[int, int, int]:
    tokens = token_counts(usage)
    assert tokens is not None and (tokens.input or tokens.output), usage
    return tokens.input, tokens.output, tokens.cached_input


# --- OpenAI, on every route ------------------------------------------------------------------

def test_predict_stream_records_the_providers_usage_when_asked(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", STREAM.format(model_id),
                           json.dumps(stream_body(stream_options={"include_usage": True})).encode())
    last = maps(response)[-1]
    record = only_record(client)
    assert counted(record) == expected(last["usage"]) and record["estimated"] is False
    assert record["outcome"] == "ok" and record["status"] == 200
    assert record["interface"] == "openai/v1/chat/completions" and record["model"] == model_id
    assert record["route"] == "/_plugins/_ml/models/{model_id}/_predict/stream"
    assert record["key"] == "-" and record["time_to_first_token_ms"] > 0 and record["duration_ms"] > 0
    assert record["cost"] is None  # the model has no pricing


def test_a_stream_without_the_providers_usage_is_estimated_from_what_was_relayed(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    response = raw_request(server.url, "POST", STREAM.format(model_id), json.dumps(stream_body()).encode())
    assert response.status == 200
    record = only_record(client)
    assert record["estimated"] is True
    assert record["output_tokens"] == len(fake_tokens(Scenario()))  # one per relayed event
    assert record["input_tokens"] > 0


def test_non_stream_predict_records_the_answers_usage(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    whole = client.ok("POST", PREDICT.format(model_id), {"parameters": {"messages": SEED_MESSAGES}})
    usage = whole["inference_results"][0]["output"][0]["dataAsMap"]["usage"]
    record = only_record(client)
    assert counted(record) == expected(usage) and record["estimated"] is False
    assert record["route"] == "/_plugins/_ml/models/{model_id}/_predict" and record["interface"] != "-"


def test_the_openai_front_records_chat_stream_and_not(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    chat = {"model": model_id, "messages": SEED_MESSAGES}
    whole = client.ok("POST", "/v1/chat/completions", chat)
    response = raw_request(server.url, "POST", "/v1/chat/completions", json.dumps(
        {**chat, "stream": True, "stream_options": {"include_usage": True}}).encode())
    chunks = [json.loads(line[6:]) for line in response.body.decode().split("\n\n") if line.startswith("data: {")]
    streamed_usage = next(chunk["usage"] for chunk in chunks if chunk.get("usage"))
    first, second = records(client)
    assert counted(first) == expected(whole["usage"]) and first["route"] == "/v1/chat/completions"
    assert counted(second) == expected(streamed_usage) and second["estimated"] is False


def test_embeddings_record_the_providers_usage(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_embedding_connector(fake))
    answer = client.ok("POST", "/v1/embeddings", {"model": model_id, "input": ["one", "two words"]})
    record = only_record(client)
    assert counted(record) == expected(answer["usage"]) and record["route"] == "/v1/embeddings"


def test_a_failed_call_is_recorded_with_its_status(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(status=500).to_model()))
    response = raw_request(server.url, "POST", STREAM.format(model_id), json.dumps(stream_body()).encode())
    failed = client.call("POST", PREDICT.format(model_id), {"parameters": {"messages": SEED_MESSAGES}})
    streamed, whole = records(client)
    assert (streamed["status"], whole["status"]) == (response.status, failed.status)
    assert streamed["status"] >= 500 and streamed["outcome"] == whole["outcome"] == "error"
    assert counted(streamed) == counted(whole) == (0, 0, 0)


def test_a_refused_request_is_no_call_and_no_record(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    assert client.call("POST", PREDICT.format(model_id), {"parameters": "not an object"}).status == 400
    assert client.call("POST", PREDICT.format("no-such-model"), {"parameters": {}}).status == 404
    assert records(client) == []


def test_a_client_hang_up_mid_stream_is_recorded_as_client_gone(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=400, delay_ms=20).to_model()))
    sock = post_stream(server.url, model_id)
    reader = sock.makefile("rb")
    assert reader.readline().startswith(b"HTTP/1.1 200")
    while b"data:" not in reader.readline():  # the first event arrived
        pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    reader.close()
    sock.close()  # a reset: the client is gone
    assert poll_until(lambda: records(client), HANG_GUARD)
    record = only_record(client)
    assert record["outcome"] == "client_gone" and record["estimated"] is True
    assert 1 <= record["output_tokens"] < 400


# --- every other interface, stream and not ---------------------------------------------------

@contextmanager
def provider_model(client: Client, interface: str, bedrock_fake: Any) -> Iterator[str]:
    if interface == "bedrock/converse":
        yield client.model_for(bedrock_connector(bedrock_fake))
        return
    fakes = {"anthropic/v1/messages": (FakeAnthropic, lambda f: fake_anthropic.connector(f.url, f.api_key)),
             "gemini/v1beta/generatecontent": (FakeGemini, lambda f: fake_gemini.connector(f.url, f.api_key)),
             "sagemaker/tgi": (lambda: FakeSageMaker(container="tgi"), None),
             "sagemaker/lmi": (lambda: FakeSageMaker(container="lmi"), None)}
    make, connector = fakes[interface]
    with make() as fake:
        if connector is None:
            connector = lambda f: fake_sagemaker.connector(f.url, f.access_key, f.secret_key, f.region)  # noqa: E731
        yield client.model_for(connector(fake))


@pytest.mark.parametrize("interface", ["bedrock/converse", "anthropic/v1/messages", "gemini/v1beta/generatecontent",
                                       "sagemaker/tgi", "sagemaker/lmi"])
def test_each_interface_records_what_its_provider_counted(server, bedrock, interface):
    client = Client(server.url)
    with provider_model(client, interface, bedrock) as model_id:
        parameters = {"inputs": "Who is Hamlet?", "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
                      "_llm_interface": interface}
        response = raw_request(server.url, "POST", STREAM.format(model_id),
                               json.dumps({"parameters": parameters}).encode())
        streamed_usage = maps(response)[-1]["usage"]
        whole = client.call("POST", PREDICT.format(model_id), {"parameters": parameters})
        assert whole.status == 200, whole.body
        answer = json.dumps(whole.body["inference_results"][0]["output"][0]["dataAsMap"]).encode()
    streamed, predicted = records(client)
    assert counted(streamed) == expected(streamed_usage) and streamed["interface"] == interface
    assert not streamed["estimated"]
    whole_tokens = answer_tokens(answer)
    if whole_tokens is None:  # SageMaker containers' plain answers carry no counts
        assert interface.startswith("sagemaker/") and predicted["estimated"] is True
    else:
        assert counted(predicted) == (whole_tokens.input, whole_tokens.output, whole_tokens.cached_input)
        assert not predicted["estimated"]


# --- pricing, budgets, limits ------------------------------------------------------------------

def priced_model(client: Client, fake) -> str:
    connector_id = client.create_connector(openai_connector(fake))
    return client.register(connector_id, pricing={"input_per_1m": 1_000_000, "output_per_1m": 1_000_000})


def test_cost_from_the_models_pricing(server, fake):
    client = Client(server.url)
    model_id = priced_model(client, fake)
    whole = client.ok("POST", PREDICT.format(model_id), {"parameters": {"messages": SEED_MESSAGES}})
    usage = whole["inference_results"][0]["output"][0]["dataAsMap"]["usage"]
    record = only_record(client)
    assert record["cost"] == usage["prompt_tokens"] + usage["completion_tokens"]  # one unit a token


def test_an_embedding_models_price_needs_no_output_price_any_other_model_does(server, fake):
    client = Client(server.url)
    embedding_id = client.register(client.create_connector(openai_embedding_connector(fake)),
                                   pricing={"input_per_1m": 1_000_000})
    ml = "/_plugins/_ml/models"
    assert client.ok("GET", f"{ml}/{embedding_id}")["pricing"] == {"input_per_1m": 1_000_000, "output_per_1m": 0}
    answer = client.ok("POST", "/v1/embeddings", {"model": embedding_id, "input": ["one", "two words"]})
    assert only_record(client)["cost"] == answer["usage"]["prompt_tokens"]  # one unit an input token
    client.ok("PUT", f"{ml}/{embedding_id}", {"pricing": {"input_per_1m": 2}})
    assert client.ok("GET", f"{ml}/{embedding_id}")["pricing"] == {"input_per_1m": 2, "output_per_1m": 0}
    # a chat model: the same 400 as ever, at register and update, and nothing stored
    chat_connector = client.create_connector(openai_connector(fake))
    chat_id = client.register(chat_connector)
    searched = {"query": {"match_all": {}}}
    before = client.ok("POST", f"{ml}/_search", searched)["hits"]["total"]
    for method, path, body in (("POST", f"{ml}/_register", {"name": "chat", "function_name": "remote",
                                                            "connector_id": chat_connector,
                                                            "pricing": {"input_per_1m": 1}}),
                               ("PUT", f"{ml}/{chat_id}", {"pricing": {"input_per_1m": 1}})):
        refused = client.call(method, path, body)
        assert refused.status == 400 and refused.body["error"]["reason"] == (
            "[pricing.output_per_1m] is required (a price per million tokens; 0 for free)"), refused.body
    assert client.ok("POST", f"{ml}/_search", searched)["hits"]["total"] == before
    assert "pricing" not in client.ok("GET", f"{ml}/{chat_id}")


def test_a_spent_budget_refuses_the_next_call_while_other_keys_go_on(server, fake):
    keys = KeyStore(server.app.store)
    _, admin = keys.create("admin", "ops")
    _, tight = keys.create("user", "tight", KeyLimits(budget=1.0))
    _, other = keys.create("user", "other")
    admin_client = client_with(server.url, bearer(admin))
    model_id = priced_model(admin_client, fake)
    body = {"parameters": {"messages": SEED_MESSAGES}}
    tight_client, other_client = client_with(server.url, bearer(tight)), client_with(server.url, bearer(other))
    assert tight_client.call("POST", PREDICT.format(model_id), body).status == 200  # spends past 1.0
    refused = tight_client.call("POST", PREDICT.format(model_id), body)
    assert refused.status == 429 and refused.body["error"]["type"] == "budget_exceeded", refused.body
    assert int(refused.headers["Retry-After"]) > 0
    openai = tight_client.call("POST", "/v1/chat/completions", {"model": model_id, "messages": SEED_MESSAGES})
    assert openai.status == 429 and openai.body["error"]["code"] == "insufficient_quota", openai.body
    assert other_client.call("POST", PREDICT.format(model_id), body).status == 200
    calls = len(fake.stats.requests)
    stream = raw_request(server.url, "POST", STREAM.format(model_id), json.dumps(stream_body()).encode(),
                         headers=bearer(tight))
    assert stream.status == 429 and len(fake.stats.requests) == calls  # refused before the provider
    assert [r["key"] for r in records(admin_client)] == ["tight", "other"]


def test_rpm_is_exact_under_concurrent_streams(server, fake):
    keys = KeyStore(server.app.store)
    _, admin = keys.create("admin", "ops")
    _, limited = keys.create("user", "limited", KeyLimits(rpm=3))
    model_id = client_with(server.url, bearer(admin)).model_for(
        openai_connector(fake, model=Scenario(chunks=20, delay_ms=5).to_model()))
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        response = raw_request(server.url, "POST", STREAM.format(model_id), json.dumps(stream_body()).encode(),
                               headers=bearer(limited))
        with lock:
            statuses.append(response.status)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
    assert sorted(statuses) == [200] * 3 + [429] * 5


def test_tpm_refuses_once_the_window_holds_the_tokens(server, fake):
    keys = KeyStore(server.app.store)
    _, admin = keys.create("admin", "ops")
    _, limited = keys.create("user", "limited", KeyLimits(tpm=5))
    model_id = client_with(server.url, bearer(admin)).model_for(openai_connector(fake))
    limited_client = client_with(server.url, bearer(limited))
    body = {"parameters": {"messages": SEED_MESSAGES}}
    assert limited_client.call("POST", PREDICT.format(model_id), body).status == 200  # more than 5 tokens
    refused = limited_client.call("POST", PREDICT.format(model_id), body)
    assert refused.status == 429 and refused.body["error"]["type"] == "rate_limited", refused.body


def test_records_survive_a_restart(make_server, fake):
    first = make_server()
    client = Client(first.url)
    model_id = client.model_for(openai_connector(fake))
    client.ok("POST", PREDICT.format(model_id), {"parameters": {"messages": SEED_MESSAGES}})
    before = records(client)
    first.stop(drain_timeout=0)
    assert records(Client(make_server().url)) == before and len(before) == 1


def test_the_messages_and_responses_fronts_record_the_providers_counts(server, fake):
    client = Client(server.url)
    model_id = client.model_for(openai_connector(fake))
    message = client.ok("POST", "/v1/messages", {"model": model_id, "max_tokens": 64,
                                                 "messages": [{"role": "user", "content": "Who is Hamlet?"}]})
    streamed = raw_request(server.url, "POST", "/v1/messages", json.dumps(
        {"model": model_id, "max_tokens": 64, "stream": True,
         "messages": [{"role": "user", "content": "Who is Hamlet?"}]}).encode())
    assert streamed.status == 200 and b"message_stop" in streamed.body
    response = client.ok("POST", "/v1/responses", {"model": model_id, "input": "Who is Hamlet?", "store": False})
    whole, stream, responses = records(client)
    assert counted(whole) == (message["usage"]["input_tokens"], message["usage"]["output_tokens"], 0)
    assert [r["route"] for r in (whole, stream, responses)] == ["/v1/messages", "/v1/messages", "/v1/responses"]
    assert not stream["estimated"] and stream["output_tokens"] == message["usage"]["output_tokens"]
    assert counted(responses)[:2] == (response["usage"]["input_tokens"], response["usage"]["output_tokens"])
