"""ml-commons' conversation memory API over HTTP (``/_plugins/_ml/memory``): memories, their
messages and traces, paging and search, privacy per key and tenant, restarts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.clients import Client, bearer, client_with

MEMORY = "/_plugins/_ml/memory"
MLS = "/_plugins/_mlstream"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Keys:
    def __init__(self, server: Any) -> None:
        self.url = server.url
        admin = Client(server.url).call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
        assert admin.status == 200, admin.body
        self.admin_key = admin.body["key"]
        self.admin = client_with(server.url, bearer(self.admin_key))

    def user(self, name: str, **fields: Any) -> Client:
        secret = self.admin.ok("POST", f"{MLS}/keys", {"name": name, **fields})["key"]
        return client_with(self.url, bearer(secret))


@pytest.fixture
def keys(make_server) -> Keys:
    return Keys(make_server())


def test_a_memory_its_messages_and_traces_as_ml_commons_answers_them(keys: Keys) -> None:
    alice = keys.user("alice")
    memory_id = alice.ok("POST", MEMORY, {"name": "Conversation for a RAG pipeline"})["memory_id"]
    assert len(memory_id) == 20
    memory = alice.ok("GET", f"{MEMORY}/{memory_id}")
    assert memory["memory_id"] == memory_id and memory["name"] == "Conversation for a RAG pipeline"
    assert memory["user"] == "alice" and ISO.match(memory["create_time"]) and ISO.match(memory["updated_time"])

    first = alice.ok("POST", f"{MEMORY}/{memory_id}/messages", {
        "input": "How do I make an interaction?", "prompt_template": "Hello OpenAI, can you answer this question?",
        "response": "Hello, this is OpenAI. Here is the answer to your question.", "origin": "MyFirstOpenAIWrapper",
        "additional_info": {"suggestion": "api.openai.com"}})["message_id"]
    second = alice.ok("POST", f"{MEMORY}/{memory_id}/messages", {"input": "And a second one?"})["message_id"]
    for number in (2, 1):  # traces of the first message, written out of order
        alice.ok("POST", f"{MEMORY}/{memory_id}/messages", {
            "input": f"step {number}", "origin": "MLModelTool", "parent_message_id": first, "trace_number": number})

    message = alice.ok("GET", f"{MEMORY}/message/{first}")
    assert message == {"memory_id": memory_id, "message_id": first, "create_time": message["create_time"],
                       "input": "How do I make an interaction?",
                       "prompt_template": "Hello OpenAI, can you answer this question?",
                       "response": "Hello, this is OpenAI. Here is the answer to your question.",
                       "origin": "MyFirstOpenAIWrapper", "additional_info": {"suggestion": "api.openai.com"}}
    listed = alice.ok("GET", f"{MEMORY}/{memory_id}/messages")
    assert [m["message_id"] for m in listed["messages"]] == [first, second] and "next_token" not in listed
    traces = alice.ok("GET", f"{MEMORY}/message/{first}/traces")["traces"]
    assert [(t["input"], t["trace_number"], t["parent_message_id"]) for t in traces] == [
        ("step 1", 1, first), ("step 2", 2, first)]
    # a message written moves its memory's updated_time
    assert alice.ok("GET", f"{MEMORY}/{memory_id}")["updated_time"] > memory["updated_time"]

    updated = alice.ok("PUT", f"{MEMORY}/message/{second}", {"response": "Yes.", "input": "ignored"})
    assert updated["_id"] == second and updated["result"] == "updated"
    changed = alice.ok("GET", f"{MEMORY}/message/{second}")
    assert changed["response"] == "Yes." and changed["input"] == "And a second one?" and "updated_time" in changed
    alice.ok("PUT", f"{MEMORY}/{memory_id}", {"name": "renamed", "additional_info": {"k": "v"}})
    renamed = alice.ok("GET", f"{MEMORY}/{memory_id}")
    assert renamed["name"] == "renamed" and renamed["additional_info"] == {"k": "v"}

    found = alice.ok("POST", f"{MEMORY}/{memory_id}/_search", {"query": {"match": {"input": "second"}}})
    assert [hit["_id"] for hit in found["hits"]["hits"]] == [second]
    assert found["hits"]["hits"][0]["_index"] == ".plugins-ml-memory-message"
    named = alice.ok("POST", f"{MEMORY}/_search", {"query": {"term": {"name": "renamed"}}})
    assert [hit["_id"] for hit in named["hits"]["hits"]] == [memory_id]

    assert alice.ok("DELETE", f"{MEMORY}/{memory_id}") == {"success": True}
    for path in (f"{MEMORY}/{memory_id}", f"{MEMORY}/message/{first}", f"{MEMORY}/{memory_id}/messages"):
        reply = alice.call("GET", path)
        assert reply.status == 404 and reply.body["error"]["type"] == "resource_not_found_exception", (path, reply.body)
    assert alice.call("GET", f"{MEMORY}/{memory_id}").body["error"]["reason"] == f"Memory [{memory_id}] not found"


def test_memories_and_messages_page_with_max_results_and_next_token(keys: Keys) -> None:
    bob = keys.user("bob")
    made = [bob.ok("POST", MEMORY, {"name": f"m{i}"})["memory_id"] for i in range(12)]
    page = bob.ok("GET", MEMORY)
    assert len(page["memories"]) == 10 and page["next_token"] == 10
    assert [m["memory_id"] for m in page["memories"]] == made[::-1][:10]  # the last updated first
    rest = bob.ok("GET", f"{MEMORY}?max_results=10&next_token=10")
    assert [m["memory_id"] for m in rest["memories"]] == made[1::-1] and "next_token" not in rest
    for i in range(5):
        bob.ok("POST", f"{MEMORY}/{made[0]}/messages", {"input": f"q{i}"})
    first = bob.ok("GET", f"{MEMORY}/{made[0]}/messages?max_results=2")
    assert [m["input"] for m in first["messages"]] == ["q0", "q1"] and first["next_token"] == 2
    last = bob.ok("GET", f"{MEMORY}/{made[0]}/messages?max_results=2&next_token=4")
    assert [m["input"] for m in last["messages"]] == ["q4"] and "next_token" not in last
    assert bob.ok("GET", MEMORY)["memories"][0]["memory_id"] == made[0]  # its messages made it the latest


@pytest.mark.parametrize("method, path, body, words", [
    ("POST", "/messages", {"input": "", "response": "  "}, "At least one of the following parameters"),
    ("POST", "/messages", {"input": "x", "trace_number": "one"}, "trace_number"),
    ("POST", "/messages", {"input": 3}, "input"),
    ("POST", "/messages", {"input": "x", "additional_info": "no"}, "additional_info"),
    ("POST", "/messages", {"input": "x", "parent_message_id": "nope"}, "Message [nope] not found"),
    ("POST", "/messages", [1], "JSON object"),
    ("PUT", "", {}, "Request body is empty"),
    ("PUT", "", {"user": "mallory"}, "none of"),
    ("PUT", "", {"name": 5}, "name"),
    ("GET", "/messages?max_results=0", None, "max_results"),
    ("GET", "/messages?next_token=-1", None, "next_token"),
])
def test_bad_requests_are_clear_400s_and_change_nothing(keys: Keys, method: str, path: str, body: Any,
                                                        words: str) -> None:
    carol = keys.user("carol")
    memory_id = carol.ok("POST", MEMORY, {"name": "kept"})["memory_id"]
    before = carol.ok("GET", f"{MEMORY}/{memory_id}"), carol.ok("GET", f"{MEMORY}/{memory_id}/messages")
    reply = carol.call(method, f"{MEMORY}/{memory_id}{path}", body)
    assert reply.status in (400, 404) and words in reply.body["error"]["reason"], reply.body
    assert (carol.ok("GET", f"{MEMORY}/{memory_id}"), carol.ok("GET", f"{MEMORY}/{memory_id}/messages")) == before


def test_a_memory_is_its_keys_alone_another_key_or_tenant_finds_nothing(keys: Keys) -> None:
    keys.admin.ok("POST", f"{MLS}/tenants", {"name": "blue"})
    alice, bob, blue = keys.user("alice-p"), keys.user("bob-p"), keys.user("blue-p", tenant="blue")
    memory_id = alice.ok("POST", MEMORY, {"name": "private"})["memory_id"]
    message_id = alice.ok("POST", f"{MEMORY}/{memory_id}/messages", {"input": "secret"})["message_id"]
    for other in (bob, blue, keys.admin):
        for method, path, body in (
                ("GET", f"{MEMORY}/{memory_id}", None), ("PUT", f"{MEMORY}/{memory_id}", {"name": "mine"}),
                ("DELETE", f"{MEMORY}/{memory_id}", None),
                ("POST", f"{MEMORY}/{memory_id}/messages", {"input": "injected"}),
                ("GET", f"{MEMORY}/{memory_id}/messages", None),
                ("POST", f"{MEMORY}/{memory_id}/_search", {"query": {"match_all": {}}}),
                ("GET", f"{MEMORY}/message/{message_id}", None),
                ("PUT", f"{MEMORY}/message/{message_id}", {"response": "overwritten"}),
                ("GET", f"{MEMORY}/message/{message_id}/traces", None)):
            reply = other.call(method, path, body)
            assert reply.status == 404, (method, path, reply.status, reply.body)
        assert other.ok("GET", MEMORY)["memories"] == []
        assert other.ok("POST", f"{MEMORY}/_search", {"query": {"match_all": {}}})["hits"]["total"]["value"] == 0
    # the same answer as for an id that does not exist: nothing tells one from the other
    unknown = bob.call("GET", f"{MEMORY}/{'x' * 20}").body["error"]["reason"]
    assert unknown == f"Memory [{'x' * 20}] not found"
    assert alice.ok("GET", f"{MEMORY}/{memory_id}")["name"] == "private"
    assert [m["input"] for m in alice.ok("GET", f"{MEMORY}/{memory_id}/messages")["messages"]] == ["secret"]


def test_memories_survive_a_restart(make_server) -> None:
    server = make_server()
    client = Client(server.url)  # no key yet: an open server, every memory everyone's
    memory_id = client.ok("POST", MEMORY, {"name": "durable"})["memory_id"]
    client.ok("POST", f"{MEMORY}/{memory_id}/messages", {"input": "kept?"})
    assert "user" not in client.ok("GET", f"{MEMORY}/{memory_id}")
    server.stop(drain_timeout=0)
    again = Client(make_server().url)
    assert [m["input"] for m in again.ok("GET", f"{MEMORY}/{memory_id}/messages")["messages"]] == ["kept?"]
    assert again.ok("POST", MEMORY) and len(again.ok("GET", MEMORY)["memories"]) == 2  # a body is optional
