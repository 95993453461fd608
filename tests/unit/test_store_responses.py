"""Stored responses (the Responses front's ``store``), on both backends: kept until they
expire, read, deleted, replaced; expired ones purged; records and their change counter
untouched."""

from __future__ import annotations

import time

from mlstream.store.sqlite import Paced, SQLiteStore, Store

from ..support.stores import StoreFactory


def test_a_response_is_kept_read_replaced_and_deleted(make_store: StoreFactory) -> None:
    store = make_store()
    later = time.time() + 3600
    store.put_responses([("resp_1", {"response": {"id": "resp_1"}, "conversation": [{"role": "user"}]}, later)])
    assert store.get_response("resp_1") == {"response": {"id": "resp_1"}, "conversation": [{"role": "user"}]}
    store.put_responses([("resp_1", {"response": {"id": "resp_1", "v": 2}}, later)])
    assert store.get_response("resp_1") == {"response": {"id": "resp_1", "v": 2}}
    assert store.get_response("resp_2") is None
    assert store.delete_response("resp_1") is True
    assert store.delete_response("resp_1") is False
    assert store.get_response("resp_1") is None
    assert store.scan("model") == []


def test_an_expired_response_is_gone_and_purged_when_the_purge_is_due(make_store: StoreFactory) -> None:
    store = make_store()
    clock = [0.0]
    store.response_purge = Paced(60.0, clock=lambda: clock[0])
    store.put_responses([("old", {"n": 1}, time.time() - 1)])  # the first keeping purges (nothing yet)
    assert store.get_response("old") is None and store.delete_response("old") is False
    store.put_responses([("new", {"n": 2}, time.time() + 3600)])
    assert stored_ids(store) == {"old", "new"}  # not yet due: the expired row is only hidden
    clock[0] = 60.0
    store.put_responses([("newer", {"n": 3}, time.time() + 3600)])
    assert stored_ids(store) == {"new", "newer"}
    assert store.get_response("new") == {"n": 2}


def stored_ids(store: Store) -> set[str]:
    """Every row of the responses table, expired ones included."""
    if isinstance(store, SQLiteStore):
        return {row[0] for row in store._responses("SELECT id FROM response", ())}
    return {row[0] for row in store._query("SELECT id FROM mlstream_response")}  # type: ignore[attr-defined]


def test_a_paced_chore_is_due_at_once_then_once_per_interval() -> None:
    clock = [100.0]
    paced = Paced(60.0, clock=lambda: clock[0])
    assert paced.due() and not paced.due()
    clock[0] = 159.9
    assert not paced.due()
    clock[0] = 160.0
    assert paced.due() and not paced.due()


def test_keeping_a_response_moves_no_change_counter(make_store: StoreFactory) -> None:
    store = make_store()
    before = store.change_counter()
    store.put_responses([("resp_1", {"n": 1}, time.time() + 3600)])
    store.delete_response("resp_1")
    assert store.change_counter() == before
