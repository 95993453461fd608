"""Conversation memory's tables on a real SQLite file, and its service without sockets:
order, paging, traces, a conversation deleted with its messages, concurrent writers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mlstream.access.keys import ApiKey, Caller
from mlstream.access.tenants import DEFAULT
from mlstream.errors import NotFound
from mlstream.memory.conversations import Conversations, iso_time
from mlstream.store.memory_table import SQLiteMemory


@pytest.fixture
def table(tmp_path: Path):
    opened = SQLiteMemory(tmp_path, 5.0)
    yield opened
    opened.close()


def test_conversations_list_last_updated_first_and_messages_oldest_first(table: SQLiteMemory) -> None:
    table.put_conversation("a", "t/k1", 1, 1, {"name": "a"})
    table.put_conversation("b", "t/k1", 2, 2, {"name": "b"})
    table.put_conversation("c", "t/k2", 3, 3, {"name": "c"})
    assert [i for i, _ in table.conversations("t/k1", 0, 10)] == ["b", "a"]
    table.put_message("m1", "a", 10, None, None, {"input": "1"}, {"name": "a"})  # moves a's updated time
    table.put_message("m2", "a", 11, None, None, {"input": "2"}, {"name": "a"})
    table.put_message("t2", "a", 12, "m1", 2, {"input": "trace 2"}, None)
    table.put_message("t1", "a", 13, "m1", 1, {"input": "trace 1"}, None)
    assert [i for i, _ in table.conversations("t/k1", 0, 10)] == ["a", "b"]
    assert [i for i, _ in table.conversations("t/k1", 1, 10)] == ["b"]
    assert [i for i, _ in table.messages("a", 0, 10)] == ["m1", "m2"]  # traces left out
    assert [i for i, _ in table.messages("a", 0, 10, newest_first=True)] == ["m2", "m1"]
    assert [i for i, _ in table.traces("m1", 0, 10)] == ["t1", "t2"]
    assert table.message("t1") == ("a", {"input": "trace 1"})
    assert table.delete_conversation("a") and not table.delete_conversation("a")
    assert table.message("m1") is None and table.traces("m1", 0, 10) == [] and table.conversation("a") is None


def test_concurrent_writers_to_one_memory_lose_nothing(table: SQLiteMemory) -> None:
    memories = Conversations(lambda: table)
    caller = Caller(ApiKey("k1", "alice", "user", 0), DEFAULT)
    memory_id = memories.create({"name": "busy"}, caller)
    start = threading.Barrier(8)
    made: list[str] = []

    def writer(number: int) -> None:
        start.wait(10)
        for index in range(25):
            made.append(memories.add_message(memory_id, {"input": f"{number}-{index}"}, caller))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    listed = memories.messages(memory_id, caller, {"max_results": "1000"})["messages"]
    assert sorted(m["message_id"] for m in listed) == sorted(made) and len(made) == 200
    # each writer's own messages in the order it wrote them
    for number in range(8):
        mine = [m["input"] for m in listed if m["input"].startswith(f"{number}-")]
        assert mine == [f"{number}-{index}" for index in range(25)]


def test_another_owner_is_told_nothing_and_times_are_iso(table: SQLiteMemory) -> None:
    memories = Conversations(lambda: table, clock=lambda: 1_765_152_708_123_456_000)
    alice = Caller(ApiKey("k1", "alice", "user", 0), DEFAULT)
    bob = Caller(ApiKey("k2", "bob", "user", 0), DEFAULT)
    memory_id = memories.create({"name": "x"}, alice)
    assert memories.get(memory_id, alice)["create_time"] == iso_time(1_765_152_708_123_456_000) \
        == "2025-12-08T00:11:48.123456Z"
    with pytest.raises(NotFound, match=f"Memory \\[{memory_id}\\] not found"):
        memories.get(memory_id, bob)
    assert memories.list(bob, {})["memories"] == []
