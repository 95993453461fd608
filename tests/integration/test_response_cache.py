"""The response cache over real sockets (docs/caching.md): a model with ``"cache"`` answers
identical requests from the store, on every front, stream or not, per tenant.

Every model is on one fake OpenAI; the fake's request log counts the provider calls, so
a hit is a request the fake never saw."""

from __future__ import annotations

import json
import threading
from typing import Any

import anthropic
import openai
import pytest
from opensearchpy import OpenSearch

from mlstream.testing.fake_openai import FakeOpenAI, Scenario
from tests.support.clients import Client, EventStreamSerializer, bearer, client_with
from tests.support.connectors import openai_connector, openai_embedding_connector
from tests.support.timeouts import HANG_GUARD

ML = "/_plugins/_ml"
MLS = "/_plugins/_mlstream"
CHAT = [{"role": "user", "content": "tell me"}]
CACHE = {"mode": "exact", "ttl_s": 600}


def chat_calls(fake: FakeOpenAI) -> int:
    """Chat requests the fake (the provider) was sent."""
    return sum(1 for r in fake.stats.requests if r.path.endswith("/chat/completions"))


class Gateway:
    """A server with an admin key, and helpers to make cached models and keyed clients."""

    def __init__(self, server: Any, fake: FakeOpenAI) -> None:
        self.server, self.fake, self.url = server, fake, server.url
        first = Client(server.url).call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
        assert first.status == 200, first.body
        self.admin_key = first.body["key"]
        self.admin = client_with(server.url, bearer(self.admin_key))

    def model(self, name: str, scenario: Scenario = Scenario(chunks=4), cache: Any = CACHE, **extra: Any) -> str:
        connector_id = self.admin.create_connector(openai_connector(self.fake, model=scenario.to_model()))
        return self.admin.register(connector_id, name=name, **({"cache": cache} if cache else {}), **extra)

    def key(self, name: str, **fields: Any) -> tuple[Client, str]:
        secret = self.admin.ok("POST", f"{MLS}/keys", {"name": name, **fields})["key"]
        return client_with(self.url, bearer(secret)), secret


@pytest.fixture
def gateway(make_server, fake) -> Gateway:
    return Gateway(make_server(), fake)


def chat(client: Client, model: str, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    # urllib3 sends a request's headers instead of the pool's (the key): both, then
    return client.call("POST", "/v1/chat/completions", {"model": model, "messages": CHAT, **extra},
                       headers={**client.http.headers, **(headers or {})})


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


# --- hit, miss, refresh, no-store: per front -----------------------------------------------------

def test_openai_chat_hit_miss_refresh_no_store_and_disabled(gateway: Gateway) -> None:
    cached = gateway.model("cached", Scenario(chunks=3, text="one two three"))
    plain = gateway.model("plain", cache=None)
    admin, fake = gateway.admin, gateway.fake
    first = chat(admin, cached)
    assert first.status == 200 and first.headers["x-mlstream-cache"] == "MISS", (first.status, first.body)
    assert "Age" not in first.headers
    calls = chat_calls(fake)
    second = chat(admin, cached)
    assert second.headers["x-mlstream-cache"] == "HIT" and int(second.headers["Age"]) >= 0
    assert second.body == first.body and chat_calls(fake) == calls  # the provider saw nothing
    # a different request is another entry; the fields that do not change the answer are not
    assert chat(admin, cached, temperature=0.5).headers["x-mlstream-cache"] == "MISS"
    assert chat(admin, cached, user="someone", metadata={"k": "v"}).headers["x-mlstream-cache"] == "HIT"
    refreshed = chat(admin, cached, {"Cache-Control": "no-cache"})
    assert refreshed.headers["x-mlstream-cache"] == "REFRESH" and chat_calls(fake) == calls + 2
    bypass = chat(admin, cached, {"Cache-Control": "no-store"})
    assert bypass.headers["x-mlstream-cache"] == "BYPASS" and chat_calls(fake) == calls + 3
    assert chat(admin, plain).headers["x-mlstream-cache"] == "DISABLED"
    assert chat(admin, plain).headers["x-mlstream-cache"] == "DISABLED"


def test_a_stream_and_a_non_stream_request_share_the_entry_both_ways(gateway: Gateway) -> None:
    model = gateway.model("shared", Scenario(chunks=5, text="alpha beta gamma delta epsilon"))
    admin, fake = gateway.admin, gateway.fake
    streamed = admin.call("POST", "/v1/chat/completions", {"model": model, "messages": CHAT, "stream": True,
                                                          "stream_options": {"include_usage": True}})
    assert streamed.headers["x-mlstream-cache"] == "MISS"
    calls = chat_calls(fake)
    whole = chat(admin, model)
    assert whole.headers["x-mlstream-cache"] == "HIT" and chat_calls(fake) == calls
    assert whole.body["choices"][0]["message"]["content"] == "alpha beta gamma delta epsilon"
    assert whole.body["model"] == model and whole.body["usage"]["completion_tokens"] > 0

    # the other way: a non-stream answer serves a stream (another model, a fresh entry)
    other = gateway.model("shared-2", Scenario(chunks=2, text="x y"))
    assert chat(admin, other).headers["x-mlstream-cache"] == "MISS"
    calls = chat_calls(fake)
    replay = admin.call("POST", "/v1/chat/completions", {"model": other, "messages": CHAT, "stream": True},
                        preload_content=True)
    assert replay.headers["x-mlstream-cache"] == "HIT" and chat_calls(fake) == calls
    events = sse_data(replay.body)
    assert events[-1] == "[DONE]"
    text = "".join((json.loads(e)["choices"][0]["delta"].get("content") or "") for e in events[:-1]
                   if json.loads(e)["choices"])
    assert text == "x y"


def test_stream_replay_through_the_openai_sdk_is_chunked_like_the_original(gateway: Gateway) -> None:
    model = gateway.model("sdk", Scenario(chunks=6))
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=gateway.admin_key, max_retries=0,
                           timeout=HANG_GUARD)

    def pieces() -> tuple[list[str], str]:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=CHAT, stream=True, stream_options={"include_usage": True})
        deltas, usage = [], None
        for chunk in raw.parse():
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    deltas.append(choice.delta.content)
        assert usage is not None and usage.completion_tokens > 0
        return deltas, raw.headers["x-mlstream-cache"]

    first, status = pieces()
    assert status == "MISS" and len(first) == 6
    calls = chat_calls(gateway.fake)
    again, status = pieces()
    assert status == "HIT" and again == first and chat_calls(gateway.fake) == calls


def test_anthropic_messages_hit_stream_and_not_through_the_sdk(gateway: Gateway) -> None:
    model = gateway.model("claude-ish", Scenario(chunks=4, text="four words right here"))
    client = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.admin_key, max_retries=0,
                                 timeout=HANG_GUARD)
    first = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=CHAT)
    assert first.headers["x-mlstream-cache"] == "MISS"
    calls = chat_calls(gateway.fake)
    with client.messages.stream(model=model, max_tokens=64, messages=CHAT) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "four words right here" and final.stop_reason == "end_turn"
    again = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=CHAT)
    assert again.headers["x-mlstream-cache"] == "HIT"
    assert again.parse().content[0].text == "four words right here"
    assert chat_calls(gateway.fake) == calls


def test_responses_hit_stream_and_not(gateway: Gateway) -> None:
    model = gateway.model("resp", Scenario(chunks=3, text="a b c"))
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=gateway.admin_key, max_retries=0,
                           timeout=HANG_GUARD)
    first = client.responses.with_raw_response.create(model=model, input="tell me")
    assert first.headers["x-mlstream-cache"] == "MISS"
    calls = chat_calls(gateway.fake)
    events = list(client.responses.create(model=model, input="tell me", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "a b c"
    again = client.responses.with_raw_response.create(model=model, input="tell me")
    assert again.headers["x-mlstream-cache"] == "HIT" and again.parse().output_text == "a b c"
    assert chat_calls(gateway.fake) == calls
    # a hit is a response of its own: kept under its own id, for previous_response_id
    assert again.parse().id != first.parse().id
    assert client.responses.retrieve(again.parse().id).output_text == "a b c"


def test_ml_commons_predict_and_stream_through_opensearch_py_and_http(gateway: Gateway) -> None:
    model = gateway.model("mlc", Scenario(chunks=3, text="p q r"))
    host, port = gateway.url.removeprefix("http://").split(":")
    client = OpenSearch(hosts=[{"host": host, "port": int(port)}], http_auth=None, timeout=HANG_GUARD,
                        headers=bearer(gateway.admin_key))
    body = {"parameters": {"messages": CHAT}}
    first = client.transport.perform_request("POST", f"{ML}/models/{model}/_predict", body=body)
    calls = chat_calls(gateway.fake)
    again = client.transport.perform_request("POST", f"{ML}/models/{model}/_predict", body=body)
    assert again == first and chat_calls(gateway.fake) == calls
    raw = gateway.admin.call("POST", f"{ML}/models/{model}/_predict", body)
    assert raw.headers["x-mlstream-cache"] == "HIT" and "upstream;dur=0.0" in raw.headers["Server-Timing"]

    stream = gateway.admin.call("POST", f"{ML}/models/{model}/_predict/stream", body)
    assert stream.headers["x-mlstream-cache"] == "MISS"  # _predict's answer is the provider's JSON: not shared
    calls = chat_calls(gateway.fake)
    replay = gateway.admin.call("POST", f"{ML}/models/{model}/_predict/stream", body)
    assert replay.headers["x-mlstream-cache"] == "HIT" and chat_calls(gateway.fake) == calls
    assert sse_data(replay.body) == sse_data(stream.body)


# --- isolation, coalescing, what is stored --------------------------------------------------------

def test_two_tenants_never_share_and_scope_key_isolates_keys(gateway: Gateway) -> None:
    model = gateway.model("tenants", Scenario(chunks=2))
    per_key = gateway.model("per-key", Scenario(chunks=2), cache={"mode": "exact", "scope": "key"})
    for name in ("red", "blue"):
        gateway.admin.ok("POST", f"{MLS}/tenants", {"name": name})
    red, _ = gateway.key("red-1", tenant="red")
    red2, _ = gateway.key("red-2", tenant="red")
    blue, _ = gateway.key("blue-1", tenant="blue")
    assert chat(red, model).headers["x-mlstream-cache"] == "MISS"
    assert chat(blue, model).headers["x-mlstream-cache"] == "MISS"  # same request, another tenant
    assert chat(red2, model).headers["x-mlstream-cache"] == "HIT"   # same tenant
    # a namespace is a partition inside the tenant, never a way into another's
    assert chat(blue, model, {"x-mlstream-cache-namespace": "red"}).headers["x-mlstream-cache"] == "MISS"
    assert chat(red, per_key).headers["x-mlstream-cache"] == "MISS"
    assert chat(red2, per_key).headers["x-mlstream-cache"] == "MISS"
    assert chat(red, per_key).headers["x-mlstream-cache"] == "HIT"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_32_concurrent_identical_misses_make_one_provider_call(gateway: Gateway, stream: bool) -> None:
    model = gateway.model("herd", Scenario(chunks=4, delay_ms=50))
    before = chat_calls(gateway.fake)
    start = threading.Barrier(32)
    answers: list[Any] = [None] * 32

    def one(index: int) -> None:
        client = client_with(gateway.url, bearer(gateway.admin_key))
        start.wait(HANG_GUARD)
        answers[index] = client.call("POST", "/v1/chat/completions",
                                     {"model": model, "messages": CHAT, "stream": stream})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
    assert all(a is not None and a.status == 200 for a in answers), [a and a.status for a in answers]
    assert chat_calls(gateway.fake) == before + 1
    statuses = sorted(a.headers["x-mlstream-cache"] for a in answers)
    assert statuses == ["HIT"] * 31 + ["MISS"]
    if stream:
        texts = {"".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in sse_data(a.body)[:-1]
                         if json.loads(e)["choices"]) for a in answers}
    else:
        texts = {a.body["choices"][0]["message"]["content"] for a in answers}
    assert len(texts) == 1 and texts != {""}


def test_a_stream_cut_short_or_failed_is_never_stored(gateway: Gateway) -> None:
    cut = gateway.model("cut", Scenario(chunks=6, cut_after=2))
    broken = gateway.model("broken", Scenario(status=500))
    for _ in range(2):
        reply = gateway.admin.call("POST", "/v1/chat/completions", {"model": cut, "messages": CHAT, "stream": True})
        assert reply.headers["x-mlstream-cache"] == "MISS"
    for _ in range(2):
        assert chat(gateway.admin, broken).status >= 500
    assert gateway.admin.ok("GET", f"{MLS}/cache")["entries"] == 0


def test_hits_are_recorded_as_hits_and_count_for_rpm_not_tokens_or_budget(gateway: Gateway) -> None:
    model = gateway.model("metered", Scenario(chunks=3),
                          pricing={"input_per_1m": 1000.0, "output_per_1m": 1000.0})
    # a budget the first call spends whole: the hits after it are still served (they cost nothing)
    user, _ = gateway.key("metered-user", rpm=3, tpm=1_000_000, budget=0.000001)
    assert chat(user, model).headers["x-mlstream-cache"] == "MISS"
    assert chat(user, model).headers["x-mlstream-cache"] == "HIT"
    spent = chat(user, model, temperature=1)
    assert spent.status == 429 and spent.body["error"]["code"] == "insufficient_quota", spent.body
    records = gateway.admin.ok("GET", f"{MLS}/usage/records?key=metered-user")["records"]
    miss, hit = sorted(records, key=lambda r: r["time_ms"])
    assert not miss["cache_hit"] and miss["cost"] > 0 and miss["output_tokens"] > 0
    assert hit["cache_hit"] and hit["cost"] == 0 and hit["input_tokens"] == hit["output_tokens"] == 0
    assert (hit["saved_input_tokens"], hit["saved_output_tokens"]) == (miss["input_tokens"], miss["output_tokens"])
    assert hit["saved_cost"] == pytest.approx(miss["cost"])
    totals = gateway.admin.ok("GET", f"{MLS}/usage?key=metered-user")["totals"]
    assert totals["cache_hits"] == 1 and totals["cost"] == pytest.approx(miss["cost"])
    assert totals["saved_cost"] == pytest.approx(miss["cost"])
    third = chat(user, model)
    assert third.headers["x-mlstream-cache"] == "HIT" and third.headers["x-ratelimit-remaining-requests"] == "0", (
        third.status, third.body)
    assert chat(user, model).status == 429  # the fourth within the minute: rpm counts hits
    metrics = gateway.admin.call("GET", "/metrics", preload_content=True).body
    assert 'mlstream_cache_requests_total{result="hit"} 2' in metrics
    assert "mlstream_cache_entries 1" in metrics


def test_controls_max_age_ttl_namespace_and_a_keys_allowed_controls(gateway: Gateway) -> None:
    model = gateway.model("controls", Scenario(chunks=2))
    admin = gateway.admin
    assert chat(admin, model).headers["x-mlstream-cache"] == "MISS"
    assert chat(admin, model, {"Cache-Control": "max-age=3600"}).headers["x-mlstream-cache"] == "HIT"
    # max-age=0: the entry is too old for this request, so it calls and stores a fresh one
    assert chat(admin, model, {"Cache-Control": "max-age=0"}).headers["x-mlstream-cache"] == "MISS"
    assert chat(admin, model, {"x-mlstream-cache-namespace": "eval"}).headers["x-mlstream-cache"] == "MISS"
    assert chat(admin, model, {"x-mlstream-cache-namespace": "eval"}).headers["x-mlstream-cache"] == "HIT"
    bad = chat(admin, model, {"x-mlstream-cache-ttl": "soon"})
    assert bad.status == 400 and "x-mlstream-cache-ttl" in bad.body["error"]["message"]
    limited, _ = gateway.key("limited", allowed_cache_controls=["max-age"])
    assert chat(limited, model, {"Cache-Control": "max-age=60"}).headers["x-mlstream-cache"] == "HIT"
    refused = chat(limited, model, {"Cache-Control": "no-store"})
    assert refused.status == 403 and "no-store" in refused.body["error"]["message"], refused.body
    assert gateway.admin.ok("GET", f"{MLS}/keys/limited")["allowed_cache_controls"] == ["max-age"]


def test_delete_the_cache_by_model_and_by_tenant_and_an_edited_model_misses(gateway: Gateway) -> None:
    first = gateway.model("first", Scenario(chunks=2))
    second = gateway.model("second", Scenario(chunks=2))
    gateway.admin.ok("POST", f"{MLS}/tenants", {"name": "green"})
    green, _ = gateway.key("green-1", tenant="green")
    for client in (gateway.admin, green):
        for model in (first, second):
            assert chat(client, model).status == 200
    assert gateway.admin.ok("GET", f"{MLS}/cache")["entries"] == 4
    assert gateway.admin.ok("DELETE", f"{MLS}/cache?model={first}")["deleted"] == 2
    assert gateway.admin.ok("DELETE", f"{MLS}/cache?tenant=green")["deleted"] == 1
    assert chat(green, second).headers["x-mlstream-cache"] == "MISS"
    assert chat(gateway.admin, second).headers["x-mlstream-cache"] == "HIT"
    refused = green.call("DELETE", f"{MLS}/cache")
    assert refused.status == 403
    # a changed model (its description, its connector...) never answers from its old entries
    gateway.admin.ok("PUT", f"{ML}/models/{second}", {"description": "edited"})
    assert chat(gateway.admin, second).headers["x-mlstream-cache"] == "MISS"
    assert gateway.admin.ok("DELETE", f"{MLS}/cache")["deleted"] >= 1
    assert gateway.admin.ok("GET", f"{MLS}/cache")["entries"] == 0


def test_restart_keeps_entries(make_server, fake: FakeOpenAI) -> None:
    gateway = Gateway(make_server(), fake)
    model = gateway.model("durable", Scenario(chunks=2))
    assert chat(gateway.admin, model).headers["x-mlstream-cache"] == "MISS"
    gateway.server.stop(drain_timeout=0)
    restarted = make_server()
    calls = chat_calls(fake)
    again = chat(client_with(restarted.url, bearer(gateway.admin_key)), model)
    assert again.headers["x-mlstream-cache"] == "HIT" and chat_calls(fake) == calls


def test_the_server_default_caches_models_without_a_cache_field(make_server, fake: FakeOpenAI) -> None:
    gateway = Gateway(make_server(cache_mode="exact", cache_ttl_s=60.0), fake)
    model = gateway.model("defaulted", Scenario(chunks=2), cache=None)
    off = gateway.model("opted-out", Scenario(chunks=2), cache={"mode": "off"})
    assert chat(gateway.admin, model).headers["x-mlstream-cache"] == "MISS"
    assert chat(gateway.admin, model).headers["x-mlstream-cache"] == "HIT"
    assert chat(gateway.admin, off).headers["x-mlstream-cache"] == "DISABLED"


@pytest.mark.parametrize("cache", [{"mode": "semantic"}, {"ttl_s": 0}, {"scope": "world"}, {"size": 1}, "on"])
def test_a_bad_cache_field_is_a_clear_400_and_registers_nothing(gateway: Gateway, cache: Any) -> None:
    connector_id = gateway.admin.create_connector(openai_connector(gateway.fake))
    before = gateway.admin.ok("POST", f"{ML}/models/_search", {"query": {"match_all": {}}})["hits"]["total"]
    reply = gateway.admin.call("POST", f"{ML}/models/_register", {"name": "bad", "function_name": "remote",
                                                                  "connector_id": connector_id, "cache": cache})
    assert reply.status == 400 and "cache" in reply.body["error"]["reason"], reply.body
    after = gateway.admin.ok("POST", f"{ML}/models/_search", {"query": {"match_all": {}}})["hits"]["total"]
    assert after == before


def test_an_anthropic_model_relayed_is_replayed_as_it_came(gateway: Gateway) -> None:
    from mlstream.testing import fake_anthropic
    from mlstream.testing.fake_anthropic import FakeAnthropic

    with FakeAnthropic() as upstream:
        connector = fake_anthropic.connector(upstream.url, upstream.api_key)
        connector["parameters"]["fake"] = {"reasoning": "Let me think", "chunks": 3}
        model = gateway.admin.register(gateway.admin.create_connector(connector), name="claude-direct",
                                       cache=CACHE)
        client = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.admin_key, max_retries=0,
                                     timeout=HANG_GUARD)
        thinking = {"type": "enabled", "budget_tokens": 1024}

        def streamed() -> tuple[list[str], Any]:
            with client.messages.stream(model=model, max_tokens=2000, messages=CHAT, thinking=thinking) as stream:
                kinds = [event.type for event in stream]
                return kinds, stream.get_final_message()

        kinds, final = streamed()
        first = client.messages.with_raw_response.create(model=model, max_tokens=2000, messages=CHAT,
                                                         thinking=thinking)
        assert first.headers["x-mlstream-cache"] == "MISS"  # a relayed stream's entry serves streams only
        sent = len(upstream.stats.requests)
        again_kinds, again = streamed()
        assert again_kinds == kinds and again.content == final.content  # the provider's own events, signature too
        whole = client.messages.with_raw_response.create(model=model, max_tokens=2000, messages=CHAT,
                                                         thinking=thinking)
        assert whole.headers["x-mlstream-cache"] == "HIT" and whole.parse().content == first.parse().content
        assert len(upstream.stats.requests) == sent


FRONT_CALLS = {  # front -> (path, body for a model id, stream field)
    "openai": ("/v1/chat/completions", lambda m: {"model": m, "messages": CHAT}),
    "anthropic": ("/v1/messages", lambda m: {"model": m, "messages": CHAT, "max_tokens": 50}),
    "responses": ("/v1/responses", lambda m: {"model": m, "input": "tell me"}),
    "ml-commons": ("/_plugins/_ml/models/{m}/_predict", lambda m: {"parameters": {"messages": CHAT}}),
    "ml-commons stream": ("/_plugins/_ml/models/{m}/_predict/stream", lambda m: {"parameters": {"messages": CHAT}}),
}


@pytest.mark.parametrize("front", list(FRONT_CALLS))
def test_every_front_answers_miss_hit_refresh_bypass_and_the_provider_sees_only_what_it_must(
        gateway: Gateway, front: str) -> None:
    model = gateway.model(f"front {front}", Scenario(chunks=3))
    path, body = FRONT_CALLS[front]
    path = path.replace("{m}", model)

    def call(headers: dict[str, str] | None = None) -> tuple[str, int]:
        reply = gateway.admin.call("POST", path, body(model), headers={**gateway.admin.http.headers, **(headers or {})})
        assert reply.status == 200, (front, reply.status, reply.body)
        return reply.headers["x-mlstream-cache"], chat_calls(gateway.fake)

    status, calls = call()
    assert status == "MISS"
    assert call() == ("HIT", calls)
    assert call({"Cache-Control": "no-cache"}) == ("REFRESH", calls + 1)
    assert call({"Cache-Control": "no-store"}) == ("BYPASS", calls + 2)
    assert call() == ("HIT", calls + 2)


def test_a_stream_replayed_through_opensearch_py_is_the_same_event_stream(gateway: Gateway) -> None:
    model = gateway.model("osp-stream", Scenario(chunks=4))
    client = OpenSearch(hosts=[gateway.url], timeout=HANG_GUARD, headers=bearer(gateway.admin_key),
                        serializers={"text/event-stream": EventStreamSerializer()})
    body = {"parameters": {"messages": CHAT}}
    first = client.plugins.ml.predict_model_stream(model_id=model, body=body)
    calls = chat_calls(gateway.fake)
    again = client.plugins.ml.predict_model_stream(model_id=model, body=body)
    assert again == first and chat_calls(gateway.fake) == calls and len(first) >= 4
    assert again[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
    client.close()


# --- semantic matching ------------------------------------------------------------------------------

def ask(client: Client, model: str, question: str, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    return client.call("POST", "/v1/chat/completions",
                       {"model": model, "messages": [{"role": "user", "content": question}], **extra},
                       headers={**client.http.headers, **(headers or {})})


def embedding_calls(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.stats.requests if r.path.endswith("/embeddings"))


def semantic_model(gateway: Gateway, name: str, threshold: float = 0.9, **connector: Any) -> tuple[str, str]:
    """A chat model whose cache matches by meaning through a bag-of-words embedding model."""
    body = openai_embedding_connector(gateway.fake)
    body["parameters"]["model"] = "bag-of-words-1"
    body.update(connector)
    embedder = gateway.admin.register(gateway.admin.create_connector(body), name=f"{name} embedder")
    cache = {"mode": "semantic", "embedding_model": embedder, "threshold": threshold}
    return gateway.model(name, Scenario(chunks=3, text="Paris it is"), cache=cache), embedder


def test_a_paraphrase_is_answered_by_meaning_and_another_question_is_not(gateway: Gateway) -> None:
    model, _ = semantic_model(gateway, "semantic")
    admin, fake = gateway.admin, gateway.fake
    first = ask(admin, model, "What is the capital of France?")
    assert first.headers["x-mlstream-cache"] == "MISS" and "x-mlstream-cache-similarity" not in first.headers
    calls, embedded = chat_calls(fake), embedding_calls(fake)
    assert embedded >= 1
    same_words = ask(admin, model, "what is the capital of france")
    assert same_words.headers["x-mlstream-cache"] == "HIT", same_words.headers
    assert same_words.headers["x-mlstream-cache-similarity"] == "1.0000"
    assert same_words.body["choices"][0]["message"]["content"] == "Paris it is" and chat_calls(fake) == calls
    assert embedding_calls(fake) == embedded + 1
    again = ask(admin, model, "what is the capital of france")  # kept under its own key: exact now
    assert again.headers["x-mlstream-cache"] == "HIT" and "x-mlstream-cache-similarity" not in again.headers
    assert embedding_calls(fake) == embedded + 1
    # a stream of a paraphrase, through the openai SDK
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=gateway.admin_key, timeout=HANG_GUARD, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "What is the capital of France, please?"}], stream=True)
    assert raw.headers["x-mlstream-cache"] == "HIT" and float(raw.headers["x-mlstream-cache-similarity"]) >= 0.9
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    assert text == "Paris it is" and chat_calls(fake) == calls
    # another question, or the same one with other parameters: the provider answers
    assert ask(admin, model, "How tall is Mount Everest?").headers["x-mlstream-cache"] == "MISS"
    assert ask(admin, model, "what is the capital of france", temperature=1.5).headers["x-mlstream-cache"] == "MISS"
    assert chat_calls(fake) == calls + 2
    metrics = gateway.admin.call("GET", "/metrics", preload_content=True).body
    assert 'mlstream_cache_semantic_lookups_total{result="hit"} 2' in metrics
    assert 'mlstream_cache_semantic_lookups_total{result="miss"} 3' in metrics


def test_semantic_hits_stay_in_their_tenant_and_the_embedding_is_the_callers_usage(gateway: Gateway) -> None:
    model, embedder = semantic_model(gateway, "semantic-tenants")
    for name in ("red", "blue"):
        gateway.admin.ok("POST", f"{MLS}/tenants", {"name": name})
    red, _ = gateway.key("red-sem", tenant="red")
    blue, _ = gateway.key("blue-sem", tenant="blue", rpm=2)
    assert ask(red, model, "What is the capital of France?").headers["x-mlstream-cache"] == "MISS"
    assert ask(blue, model, "what is the capital of france").headers["x-mlstream-cache"] == "MISS"
    assert ask(red, model, "what is the CAPITAL of France!").headers["x-mlstream-cache"] == "HIT"
    # the embedding is the caller's call, but the request it is made for took the rpm's place
    second = ask(blue, model, "How tall is Mount Everest?")
    assert second.status == 200 and second.headers["x-mlstream-cache"] == "MISS", second.body
    assert ask(blue, model, "And K2?").status == 429  # the third request of the minute
    records = gateway.admin.ok("GET", f"{MLS}/usage/records?key=blue-sem")["records"]
    by_route = sorted((r["route"], r["model"], r["cache_hit"]) for r in records)
    assert by_route == [("/v1/chat/completions", model, False)] * 2 + [("response-cache/embedding", embedder, False)] * 2


def test_a_failing_embedding_model_leaves_the_cache_exact_and_the_call_answered(gateway: Gateway) -> None:
    body_key = {"credential": {"openAI_key": "sk-wrong"}}  # the fake refuses it: 401
    model, _ = semantic_model(gateway, "semantic-down", **body_key)
    admin = gateway.admin
    assert ask(admin, model, "What is the capital of France?").headers["x-mlstream-cache"] == "MISS"
    assert ask(admin, model, "What is the capital of France?").headers["x-mlstream-cache"] == "HIT"
    assert ask(admin, model, "what is the capital of france").headers["x-mlstream-cache"] == "MISS"
    metrics = admin.call("GET", "/metrics", preload_content=True).body
    assert 'mlstream_cache_semantic_lookups_total{result="error"}' in metrics


def test_a_semantic_cache_needs_a_registered_embedding_model(gateway: Gateway) -> None:
    connector_id = gateway.admin.create_connector(openai_connector(gateway.fake))
    reply = gateway.admin.call("POST", f"{ML}/models/_register", {
        "name": "no embedder", "function_name": "remote", "connector_id": connector_id,
        "cache": {"mode": "semantic", "embedding_model": "no-such-model"}})
    assert reply.status == 400 and "embedding_model" in json.dumps(reply.body), reply.body
    model = gateway.model("exact first")
    reply = gateway.admin.call("PUT", f"{ML}/models/{model}", {"cache": {"mode": "semantic",
                                                                         "embedding_model": model}})
    assert reply.status == 400 and "embedding_model" in json.dumps(reply.body), reply.body
    assert chat(gateway.admin, model).headers["x-mlstream-cache"] == "MISS"  # unchanged: exact
