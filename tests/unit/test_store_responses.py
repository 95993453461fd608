"""Stored responses (the Responses front's ``store``), on both backends: kept until they
expire, read, deleted, replaced; expired ones purged; records and their change counter
untouched."""

from __future__ import annotations

import time

from ..support.stores import StoreFactory


def test_a_response_is_kept_read_replaced_and_deleted(make_store: StoreFactory) -> None:
    store = make_store()
    later = time.time() + 3600
    store.put_response("resp_1", {"response": {"id": "resp_1"}, "conversation": [{"role": "user"}]}, later)
    assert store.get_response("resp_1") == {"response": {"id": "resp_1"}, "conversation": [{"role": "user"}]}
    store.put_response("resp_1", {"response": {"id": "resp_1", "v": 2}}, later)
    assert store.get_response("resp_1") == {"response": {"id": "resp_1", "v": 2}}
    assert store.get_response("resp_2") is None
    assert store.delete_response("resp_1") is True
    assert store.delete_response("resp_1") is False
    assert store.get_response("resp_1") is None
    assert store.scan("model") == []


def test_an_expired_response_is_gone_and_purged(make_store: StoreFactory) -> None:
    store = make_store()
    store.put_response("old", {"n": 1}, time.time() - 1)
    assert store.get_response("old") is None and store.delete_response("old") is False
    store.put_response("new", {"n": 2}, time.time() + 3600)  # purges the expired
    assert store.get_response("new") == {"n": 2}


def test_keeping_a_response_moves_no_change_counter(make_store: StoreFactory) -> None:
    store = make_store()
    before = store.change_counter()
    store.put_response("resp_1", {"n": 1}, time.time() + 3600)
    store.delete_response("resp_1")
    assert store.change_counter() == before
