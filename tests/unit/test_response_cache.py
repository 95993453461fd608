"""The response cache without sockets: its rules (``caching``), its table on a real SQLite
file, a chat answer's conversions, and identical calls in flight sharing one (a bounded
stress loop)."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from mlstream.access.keys import ApiKey, Caller
from mlstream.access.tenants import DEFAULT, Tenant
from mlstream.caching import (CacheConfig, CacheControls, Entry, cache_key, entry_doc, entry_of, parse_cache,
                              parse_controls)
from mlstream.errors import BadRequest, Forbidden, UpstreamError
from mlstream.fronts.chat import chat_cache_use, completion_of_pieces, pieces_of_chunks, pieces_of_completion
from mlstream.inference.cache import CacheUse, Recording, ResponseCache, stream_entry
from mlstream.metrics import Metrics
from mlstream.providers.events import Chunk, Delta, Done, Failure, Reasoning, Started
from mlstream.settings.server import ServerSettings
from mlstream.caching.semantic import best_match, semantic_split, vector_bytes
from mlstream.store.cache_table import SQLiteCache

from ..support.pools import StubPool


# --- a model's cache field, a request's controls ------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ({}, CacheConfig()),
    ({"mode": "exact", "ttl_s": 60}, CacheConfig("exact", 60.0)),
    ({"mode": "off"}, CacheConfig("off")),
    ({"scope": "key", "ttl_s": 0.5}, CacheConfig("exact", 0.5, "key")),
    ({"mode": "semantic", "embedding_model": "e1"}, CacheConfig("semantic", embedding_model="e1", threshold=0.95)),
    ({"mode": "semantic", "embedding_model": "e1", "threshold": 1}, CacheConfig("semantic", embedding_model="e1",
                                                                               threshold=1.0)),
])
def test_a_cache_field_parses(value: Any, expected: CacheConfig) -> None:
    assert parse_cache(value) == expected
    assert parse_cache(expected.to_doc()) == expected  # stored, read back


@pytest.mark.parametrize("value, words", [
    ("exact", "object"), ({"mode": "semantic"}, "embedding_model"), ({"ttl_s": 0}, "ttl_s"),
    ({"ttl_s": True}, "ttl_s"), ({"ttl_s": "60"}, "ttl_s"), ({"scope": "team"}, "scope"), ({"size": 3}, "size"),
    ({"mode": "fuzzy"}, "mode"), ({"mode": "semantic", "embedding_model": ""}, "embedding_model"),
    ({"mode": "semantic", "embedding_model": "e", "threshold": 0}, "threshold"),
    ({"mode": "semantic", "embedding_model": "e", "threshold": 1.5}, "threshold"),
    ({"mode": "semantic", "embedding_model": "e", "threshold": True}, "threshold"),
    ({"mode": "exact", "embedding_model": "e"}, "semantic"), ({"threshold": 0.9}, "semantic"),
])
def test_a_bad_cache_field_says_what_is_wrong(value: Any, words: str) -> None:
    with pytest.raises(BadRequest, match=words):
        parse_cache(value)


@pytest.mark.parametrize("headers, expected", [
    ((None, None, None), CacheControls()),
    (("no-cache", None, None), CacheControls(no_cache=True)),
    (("No-Store, max-age=30", None, None), CacheControls(no_store=True, max_age=30.0)),
    (('max-age="0"', None, None), CacheControls(max_age=0.0)),
    (("private, no-transform", None, None), CacheControls()),  # a cache may ignore what it does not act on
    ((None, "120", "team/eval-1"), CacheControls(ttl=120.0, namespace="team/eval-1")),
])
def test_request_controls_parse(headers: tuple, expected: CacheControls) -> None:
    assert parse_controls(*headers) == expected


@pytest.mark.parametrize("headers, words", [
    (("max-age=soon", None, None), "max-age"), (("max-age=-1", None, None), "max-age"),
    ((None, "0", None), "ttl"), ((None, "1.5", None), "ttl"), ((None, None, "a b"), "namespace"),
    ((None, None, "x" * 129), "namespace"),
])
def test_bad_controls_are_a_400_naming_the_header(headers: tuple, words: str) -> None:
    with pytest.raises(BadRequest, match=words):
        parse_controls(*headers)


def test_controls_used_by_their_allowed_names() -> None:
    used = parse_controls("no-cache, no-store, max-age=1", "5", "ns").used()
    assert used == ["no-cache", "no-store", "max-age", "ttl", "namespace"]


# --- the key ------------------------------------------------------------------------------------

def key(**changes: Any) -> str:
    fields = {"scope": "t", "model_id": "m", "version": "1/2", "interface": "openai/v1/chat/completions",
              "namespace": "", "request": {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}}
    fields.update(changes)
    return cache_key(**fields)


def test_the_key_is_canonical_and_every_part_counts() -> None:
    base = key()
    assert len(base) == 64 and base == key(request={"temperature": 0, "messages": [{"content": "hi", "role": "user"}]})
    for change in ({"scope": "u"}, {"model_id": "n"}, {"version": "1/3"}, {"interface": "anthropic/v1/messages"},
                   {"namespace": "x"}, {"request": {"messages": [], "temperature": 0}}):
        assert key(**change) != base, change


def test_fields_that_do_not_change_the_answer_are_not_in_the_key() -> None:
    body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "seed": 1}
    plan = _cache().plan("m", CacheConfig(), "v", chat_cache_use("i", body), CacheControls(), None)[0]
    same = {**body, "model": "b", "stream": True, "stream_options": {"include_usage": True}, "user": "u",
            "metadata": {"k": "v"}}
    other = {**body, "seed": 2}
    cache = _cache()
    assert cache.plan("m", CacheConfig(), "v", chat_cache_use("i", same), CacheControls(), None)[0].key == plan.key
    assert cache.plan("m", CacheConfig(), "v", chat_cache_use("i", other), CacheControls(), None)[0].key != plan.key


def test_scope_is_the_tenant_or_the_key_and_a_key_may_be_limited_to_some_controls() -> None:
    cache = _cache()
    alice = Caller(ApiKey("k1", "alice", "user", 0, allowed_cache_controls=("max-age",)), DEFAULT)
    bob = Caller(ApiKey("k2", "bob", "user", 0), DEFAULT)
    use = CacheUse("i", {"messages": []})

    def planned(caller: Caller, config: CacheConfig = CacheConfig(), controls: CacheControls = CacheControls()):
        return cache.plan("m", config, "v", use, controls, caller)

    assert planned(alice)[0].key == planned(bob)[0].key  # one tenant
    assert planned(alice, CacheConfig(scope="key"))[0].key != planned(bob, CacheConfig(scope="key"))[0].key
    assert planned(alice, CacheConfig(scope="key"))[0].scope == "default/key:k1"
    assert planned(alice, controls=CacheControls(max_age=5.0))[0].max_age == 5.0
    with pytest.raises(Forbidden, match="no-store"):
        planned(alice, controls=CacheControls(no_store=True))
    assert planned(bob, controls=CacheControls(no_store=True)) == (None, "BYPASS")
    assert planned(bob, CacheConfig("off")) == (None, "DISABLED")
    assert cache.plan("m", None, "v", use, CacheControls(), bob) == (None, "DISABLED")  # no server default


# --- an entry, stored and read back -------------------------------------------------------------

def test_an_entry_round_trips_and_an_unknown_version_is_a_miss() -> None:
    entry = Entry(None, (("d", "a"), ("r", "why"), ("d", {"id": "c1", "type": "function",
                                                        "function": {"name": "f", "arguments": "{}"}})),
                  "stop", {"prompt_tokens": 3}, 3, 4, 0.5, 0)
    doc = json.loads(json.dumps(entry_doc(entry)))
    assert entry_of(doc, 7) == Entry(entry.answer, entry.pieces, "stop", {"prompt_tokens": 3}, 3, 4, 0.5, 7)
    assert entry_of({**doc, "v": 99}, 0) is None


def test_the_table_keeps_expires_caps_and_deletes(tmp_path: Path) -> None:
    table = SQLiteCache(tmp_path, 5.0)
    try:
        table.put("k1", "red", "m1", {"v": 1}, 10.0, 10_000, now=100.0)
        assert table.get("k1", now=105.0) == ({"v": 1}, 100.0)
        assert table.get("k1", now=110.0) is None  # expired
        table.put("k1", "red", "m1", {"v": 2}, 10.0, 10_000, now=200.0)  # replaced
        assert table.get("k1", now=201.0) == ({"v": 2}, 200.0)
        table.put("k2", "red/key:abc", "m2", {"v": 3}, 10.0, 10_000, now=201.0)
        table.put("k3", "blue", "m1", {"v": 4}, 10.0, 10_000, now=202.0)
        assert table.stats(now=203.0)[0] == 3
        # the oldest go first once the cap is passed
        size = table.stats(now=203.0)[1]
        entries, after = table.put("k4", "blue", "m2", {"v": 5}, 10.0, size, now=204.0)
        assert table.get("k1", now=204.0) is None and table.get("k4", now=204.0) is not None
        assert after <= size and entries == 3
        assert table.delete(scope="red", model_id=None) == 1  # k2, a key-scoped entry of red's
        assert table.delete(model_id="m1") == 1
        assert table.delete() == 1 and table.stats(now=205.0) == (0, 0)
    finally:
        table.close()


# --- a chat answer's conversions ------------------------------------------------------------------

def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0, **extra: Any) -> str:
    return json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": index, "delta": delta, "finish_reason": finish}], **extra})


def test_relayed_chunks_read_as_pieces_with_whole_tool_calls() -> None:
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "hm"}),
              chunk({"content": "Hel"}), chunk({"content": "lo"}),
              chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get", "arguments": ""}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
              chunk({}, "tool_calls"),
              json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}})]
    pieces, finish, usage = pieces_of_chunks(chunks)
    assert pieces == [("r", "hm"), ("d", "Hel"), ("d", "lo"),
                      ("d", {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}})]
    assert finish == "tool_calls" and usage == {"prompt_tokens": 5, "completion_tokens": 7}
    assert pieces_of_chunks([chunk({"content": "a"}, index=1)]) is None  # several choices: not stored
    assert pieces_of_chunks(["not json"]) is None


def test_a_completion_and_its_pieces_convert_both_ways() -> None:
    pieces = (("r", "think"), ("d", "The "), ("d", "answer"),
              ("d", {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}))
    entry = Entry(None, pieces, "tool_use", {"input_tokens": 2, "output_tokens": 3})
    completion = completion_of_pieces(entry)
    message = completion["choices"][0]["message"]
    assert message["content"] == "The answer" and message["reasoning_content"] == "think"
    assert message["tool_calls"] == [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    back, finish, usage = pieces_of_completion(json.dumps(completion))  # the provider's JSON text too
    assert back == [("r", "think"), ("d", "The answer"), pieces[3]]
    assert finish == "tool_calls" and usage["completion_tokens"] == 3


def test_several_choices_are_served_only_as_they_were_made() -> None:
    use = chat_cache_use("i", {"messages": [], "n": 2}, relayed_chunks=True)
    assert use.answer_of is None and use.pieces_of is None and use.chunks is None


# --- a stream's recording -------------------------------------------------------------------------

def test_a_recording_stores_only_a_completed_stream_within_its_size() -> None:
    use = CacheUse("i", {})
    done = Recording(1000)
    for item in (Started(), Reasoning("r"), Delta("a"), Delta("b"), Done("stop", {"x": 1})):
        done.take(item)
    assert stream_entry(use, done, (1, 2), 0.5) == Entry(None, (("r", "r"), ("d", "a"), ("d", "b")), "stop",
                                                         {"x": 1}, 1, 2, 0.5)
    failed = Recording(1000)
    for item in (Delta("a"), Failure(UpstreamError("cut", kind="stream"))):
        failed.take(item)
    assert stream_entry(use, failed, (0, 0), None) is None
    cut = Recording(1000)
    cut.take(Delta("a"))  # never ended
    assert stream_entry(use, cut, (0, 0), None) is None
    big = Recording(3)
    for item in (Delta("abcd"), Done("stop")):
        big.take(item)
    assert stream_entry(use, big, (0, 0), None) is None
    relayed = Recording(1000)
    for item in (Chunk(b'{"a":1}'), Done()):
        relayed.take(item)
    assert stream_entry(use, relayed, (0, 0), None).pieces == (("c", '{"a":1}'),)


# --- identical calls in flight ----------------------------------------------------------------------

class MemoryTable:
    """The table's interface in memory, for the flights' stress loop (the SQLite one is above):
    it counts look-ups, so a test can hold its leader until every request has looked."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[dict, float]] = {}
        self.groups: dict[str, list[tuple[str, bytes]]] = {}
        self.lock = threading.Condition()
        self.lookups = 0

    def get(self, key: str, now: float | None = None):
        with self.lock:
            self.lookups += 1
            self.lock.notify_all()
            return self.rows.get(key)

    def wait_lookups(self, count: int) -> None:
        with self.lock:
            self.lock.wait_for(lambda: self.lookups >= count, timeout=10)

    def put(self, key, scope, model_id, doc, ttl_s, max_bytes, now=None, semantic=None):
        with self.lock:
            self.rows[key] = (json.loads(json.dumps(doc)), now or 0.0)
            if semantic is not None:
                self.groups.setdefault(semantic[0], []).insert(0, (key, semantic[1]))
            return len(self.rows), 0

    def similar(self, group, now=None, limit=1000):
        with self.lock:
            return list(self.groups.get(group, ()))[:limit]


def _cache(table: Any = None, embed: Any = None) -> ResponseCache:
    memory = table or MemoryTable()
    return ResponseCache(lambda: memory, ServerSettings(), Metrics(StubPool()), embed=embed)


@pytest.mark.parametrize("round_", range(20))
def test_identical_calls_in_flight_make_one_call_and_every_waiter_gets_it(round_: int) -> None:
    table = MemoryTable()
    cache = _cache(table)
    plan = cache.plan("m", CacheConfig(), "v", CacheUse("i", {"n": round_}), CacheControls(), None)[0]
    calls, served = [], []
    start = threading.Barrier(16)
    leader_fails = round_ % 4 == 0  # then a waiter calls in its place

    def one(index: int) -> None:
        start.wait(10)
        hit, flight = cache.consult(plan, stream=False)
        if hit is not None:
            served.append(hit.entry.answer)
            return
        calls.append(index)
        failing = leader_fails and len(calls) == 1
        if len(calls) == 1:
            table.wait_lookups(16)  # the "provider call" lasts until every request has looked
        cache.land(plan, flight, None if failing else Entry({"answer": index}))
        if not failing:
            served.append({"answer": index})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert len(calls) == (2 if leader_fails else 1), calls
    assert len(served) == (15 if leader_fails else 16)
    assert len({json.dumps(answer) for answer in served}) == 1
    assert not cache._flights  # every flight landed


# --- semantic matching ------------------------------------------------------------------------------

@pytest.mark.parametrize("request_, text, rest", [
    ({"messages": [{"role": "user", "content": "Hi"}], "temperature": 0},
     "user: Hi", {"temperature": 0}),
    ({"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": [
        {"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}], "tools": []},
     "system: Be brief\nuser: Hello", {"tools": []}),
    ({"system": "Be brief", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 9},  # Anthropic
     "system: Be brief\nuser: Hi", {"max_tokens": 9}),
    ({"parameters": {"messages": [{"role": "user", "content": "Hi"}], "_llm_interface": "x"}},  # ml-commons
     "user: Hi", {"parameters": {"_llm_interface": "x"}}),
    ({"parameters": {"prompt": "Hi", "max_tokens": 3}}, "prompt: Hi", {"parameters": {"max_tokens": 3}}),
    ({"instructions": "Be brief", "input": "Hi"}, "instructions: Be brief\ninput: Hi", {}),  # Responses
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]},
     "user: Hi", {}),
])
def test_a_plain_conversation_is_split_from_what_must_match_exactly(request_: Any, text: str, rest: Any) -> None:
    assert semantic_split(request_) == (text, rest)


@pytest.mark.parametrize("request_", [
    {"temperature": 0},  # no conversation
    {"messages": []},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]},
    {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c"}]},
    {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c"}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}]},
    {"messages": "Hi"}, {"prompt": ["a", "b"]}, {"parameters": {"inputs": 3}},
    {"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]},
])
def test_anything_but_plain_text_is_matched_exactly_only(request_: Any) -> None:
    assert semantic_split(request_) is None


def test_vectors_are_unit_float32_and_the_best_match_must_reach_the_threshold() -> None:
    assert len(vector_bytes([3.0, 4.0])) == 8
    a, b, c = vector_bytes([1.0, 0.0, 0.0]), vector_bytes([0.9, 0.1, 0.0]), vector_bytes([0.0, 1.0, 0.0])
    assert best_match(a, [("c", c), ("b", b)], 0.95)[0] == "b"
    assert best_match(a, [("c", c), ("b", b)], 0.995) is None
    assert best_match(a, [("other model", vector_bytes([1.0, 0.0]))], 0.5) is None  # another length
    for bad in ([], [0.0, 0.0], [1.0, float("nan")], [True, 1.0], ["1"], [float("inf")]):
        with pytest.raises(ValueError):
            vector_bytes(bad)


def test_the_table_gives_a_groups_live_vectors_newest_first(tmp_path: Path) -> None:
    table = SQLiteCache(tmp_path, 5.0)
    try:
        table.put("k1", "red", "m", {"v": 1}, 10.0, 10_000, now=100.0, semantic=("g", b"1234"))
        table.put("k2", "red", "m", {"v": 2}, 10.0, 10_000, now=101.0, semantic=("g", b"5678"))
        table.put("k3", "red", "m", {"v": 3}, 10.0, 10_000, now=101.0, semantic=("h", b"9999"))
        table.put("k4", "red", "m", {"v": 4}, 10.0, 10_000, now=101.0)  # exact only
        assert table.similar("g", now=102.0) == [("k2", b"5678"), ("k1", b"1234")]
        assert table.similar("g", now=110.5) == [("k2", b"5678")]  # k1 expired
        assert table.similar("g", now=102.0, limit=1) == [("k2", b"5678")]
    finally:
        table.close()


def test_a_cache_db_made_before_semantic_matching_gains_its_columns(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "cache.db")
    old.execute("CREATE TABLE cache_entry (key TEXT PRIMARY KEY, scope TEXT NOT NULL, model_id TEXT NOT NULL,"
                " size INTEGER NOT NULL, created REAL NOT NULL, expires REAL NOT NULL, doc TEXT NOT NULL)")
    old.execute("INSERT INTO cache_entry VALUES ('k0', 's', 'm', 10, 100.0, 200.0, '{\"v\": 0}')")
    old.commit()
    old.close()
    table = SQLiteCache(tmp_path, 5.0)
    try:
        assert table.get("k0", now=150.0) == ({"v": 0}, 100.0)
        table.put("k1", "s", "m", {"v": 1}, 10.0, 10_000, now=150.0, semantic=("g", b"abcd"))
        assert table.similar("g", now=151.0) == [("k1", b"abcd")]
    finally:
        table.close()


SEMANTIC = CacheConfig("semantic", embedding_model="embedder", threshold=0.8)


def words_vector(text: str) -> list[float]:
    """A toy embedding: counts of a few words, so paraphrases of one question embed alike."""
    return [float(text.lower().count(word)) + 0.01 for word in ("capital", "france", "everest", "tall", "please")]


def chat(text: str, **fields: Any) -> CacheUse:
    return chat_cache_use("openai/v1/chat/completions", {"messages": [{"role": "user", "content": text}], **fields})


def consulted(cache: ResponseCache, plan: Any) -> tuple[Any, Any]:
    """What ``Predictor.prepare`` does: the exact look-up, then (the call admitted) by meaning."""
    hit, flight = cache.consult(plan, stream=False)
    if hit is None:
        hit = cache.match(plan, flight, stream=False)
    return hit, flight


def test_a_paraphrase_is_served_by_meaning_and_kept_for_an_exact_hit_next_time() -> None:
    embedded: list[str] = []

    def embed(model_id: str, text: str, caller: Any, trace: Any) -> list[float]:
        assert model_id == "embedder"
        embedded.append(text)
        return words_vector(text)

    table = MemoryTable()
    cache = _cache(table, embed)
    first = cache.plan("m", SEMANTIC, "v", chat("capital of France?"), CacheControls(), None)[0]
    hit, flight = consulted(cache, first)
    assert hit is None and flight.vector is not None
    cache.land(first, flight, Entry({"answer": "Paris"}, input_tokens=3, output_tokens=1))

    again = cache.plan("m", SEMANTIC, "v", chat("Capital of France, please"), CacheControls(), None)[0]
    hit, _ = consulted(cache, again)
    assert hit is not None and hit.entry.answer == {"answer": "Paris"} and 0.8 <= hit.similarity < 0.9
    assert len(embedded) == 2 and not cache._flights  # its flight landed with the match
    hit, _ = consulted(cache, again)  # now under its own key: exact, no embedding
    assert hit is not None and hit.similarity is None and len(embedded) == 2

    for other in (cache.plan("m", SEMANTIC, "v", chat("How tall is Everest?"), CacheControls(), None)[0],
                  cache.plan("m", SEMANTIC, "v", chat("capital of France?", temperature=1), CacheControls(), None)[0],
                  cache.plan("m2", SEMANTIC, "v", chat("capital of France?"), CacheControls(), None)[0],
                  cache.plan("m", SEMANTIC, "v2", chat("capital of France?"), CacheControls(), None)[0],
                  cache.plan("m", SEMANTIC, "v", chat("capital of France?"), CacheControls(namespace="x"), None)[0]):
        hit, flight = consulted(cache, other)
        assert hit is None, other  # another question, or another group (parameters, model, version, namespace)
        cache.land(other, flight, None)
    bob = Caller(ApiKey("k2", "bob", "user", 0), Tenant("blue"))
    hit, _ = consulted(cache, cache.plan("m", SEMANTIC, "v", chat("capital of France?"), CacheControls(), bob)[0])
    assert hit is None  # another tenant never meets these entries, by meaning either

    refresh = cache.plan("m", SEMANTIC, "v", chat("Capital of France, please?"), CacheControls(no_cache=True), None)[0]
    hit, flight = consulted(cache, refresh)
    assert hit is None and flight.vector is not None  # a refresh looks nothing up, but is stored to be found


def test_an_embedding_that_fails_leaves_the_call_uncached_by_meaning_only() -> None:
    def embed(model_id: str, text: str, caller: Any, trace: Any) -> list[float]:
        raise UpstreamError("the embedding model is down")

    metrics = Metrics(StubPool())
    table = MemoryTable()
    cache = ResponseCache(lambda: table, ServerSettings(), metrics, embed=embed)
    plan = cache.plan("m", SEMANTIC, "v", chat("capital of France?"), CacheControls(), None)[0]
    hit, flight = consulted(cache, plan)
    assert hit is None and flight.vector is None
    cache.land(plan, flight, Entry({"answer": "Paris"}))
    assert consulted(cache, plan)[0] is not None  # stored, found exactly
    assert 'mlstream_cache_semantic_lookups_total{result="error"} 1' in metrics.render()


def test_a_tool_conversation_of_a_semantic_model_is_matched_exactly_only() -> None:
    cache = _cache(MemoryTable(), lambda *args: pytest.fail("embedded a tool conversation"))
    use = chat_cache_use("i", {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c"}]})
    plan = cache.plan("m", SEMANTIC, "v", use, CacheControls(), None)[0]
    assert plan.semantic is None
    hit, flight = consulted(cache, plan)
    assert hit is None and flight.vector is None
