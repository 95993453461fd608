"""The Responses front's keeper (fronts/responses/keeper.py), socket-free on a real SQLite
store: a kept response is read at once and written by the writer thread; a delete never
loses to a write in flight; a failing store is logged and survived; past MAX_WAITING the
caller writes; close writes what waits. Then a bounded stress loop of threads keeping,
reading and deleting."""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import pytest

from mlstream.errors import StoreError
from mlstream.fronts.responses import keeper as keeper_module
from mlstream.fronts.responses.keeper import ResponseKeeper
from mlstream.store.sqlite import SQLiteStore

WAIT = 10.0  # a hang guard only


class GatedStore(SQLiteStore):
    """Its writer thread's writes wait for ``gate``; ``fail`` makes every write fail."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()  # the writer thread is inside a write
        self.fail = False

    def put_responses(self, responses: Sequence[tuple[str, dict[str, Any], float]]) -> None:
        if threading.current_thread().name == "mlstream-responses":
            self.writing.set()
            assert self.gate.wait(WAIT)
        if self.fail:
            raise StoreError("the disk is full")
        super().put_responses(responses)


@pytest.fixture
def store(tmp_path: Path):
    store = GatedStore(tmp_path)
    yield store
    store.gate.set()
    store.close()


@pytest.fixture
def keeper(store: GatedStore):
    keeper = ResponseKeeper(store)
    yield keeper
    store.gate.set()
    keeper.close()


LATER = time.time() + 3600


def test_a_kept_response_is_read_at_once_and_then_from_the_store(store, keeper) -> None:
    store.gate.clear()
    keeper.keep("resp_1", {"n": 1}, LATER)
    assert keeper.get("resp_1") == {"n": 1}  # waiting or in flight: not in the store yet
    assert store.get_response("resp_1") is None
    store.gate.set()
    assert keeper.flush(WAIT)
    assert store.get_response("resp_1") == {"n": 1} == keeper.get("resp_1")
    assert keeper.get("resp_2") is None


def test_an_expired_response_is_not_read_while_it_waits(store, keeper) -> None:
    store.gate.clear()
    keeper.keep("resp_1", {"n": 1}, LATER)  # holds the writer
    assert store.writing.wait(WAIT)
    keeper.keep("old", {"n": 2}, time.time() - 1)
    assert keeper.get("old") is None and keeper.delete("old") is False


def test_a_waiting_response_deleted_is_never_written(store, keeper) -> None:
    store.gate.clear()
    keeper.keep("resp_1", {"n": 1}, LATER)
    assert store.writing.wait(WAIT)  # resp_1 in flight: the next one waits behind it
    keeper.keep("resp_2", {"n": 2}, LATER)
    assert keeper.delete("resp_2") is True
    store.gate.set()
    assert keeper.flush(WAIT)
    assert store.get_response("resp_2") is None and keeper.get("resp_2") is None
    assert keeper.delete("resp_2") is False


def test_a_delete_waits_for_the_write_in_flight_then_removes_it(store, keeper) -> None:
    store.gate.clear()
    keeper.keep("resp_1", {"n": 1}, LATER)
    assert store.writing.wait(WAIT)
    result: list[bool] = []
    deleting = threading.Thread(target=lambda: result.append(keeper.delete("resp_1")))
    deleting.start()
    deleting.join(0.2)
    assert deleting.is_alive()  # it waits for the write: deleting first would lose to it
    store.gate.set()
    deleting.join(WAIT)
    assert result == [True]
    assert store.get_response("resp_1") is None and keeper.get("resp_1") is None


def test_a_failing_store_is_logged_and_the_writer_goes_on(store, keeper, caplog) -> None:
    store.fail = True
    with caplog.at_level(logging.WARNING, logger=keeper_module.__name__):
        keeper.keep("resp_1", {"n": 1}, LATER)
        assert keeper.flush(WAIT)
    assert "response resp_1 was not stored: the disk is full" in caplog.text
    assert keeper.get("resp_1") is None
    store.fail = False
    keeper.keep("resp_2", {"n": 2}, LATER)
    assert keeper.flush(WAIT) and store.get_response("resp_2") == {"n": 2}


def test_past_max_waiting_the_caller_writes_its_own(store, keeper, monkeypatch) -> None:
    monkeypatch.setattr(keeper_module, "MAX_WAITING", 2)
    store.gate.clear()
    keeper.keep("resp_0", {"n": 0}, LATER)
    assert store.writing.wait(WAIT)  # in flight, held
    keeper.keep("resp_1", {"n": 1}, LATER)
    keeper.keep("resp_2", {"n": 2}, LATER)  # two wait: full
    keeper.keep("resp_3", {"n": 3}, LATER)  # written by this thread, at once
    assert store.get_response("resp_3") == {"n": 3}
    assert store.get_response("resp_1") is None
    store.gate.set()
    assert keeper.flush(WAIT)
    assert [store.get_response(f"resp_{n}") for n in range(4)] == [{"n": n} for n in range(4)]


def test_close_writes_what_waits(store) -> None:
    keeper = ResponseKeeper(store)
    for n in range(5):  # the writer is still gathering them (GATHER_SECONDS) when close() comes
        keeper.keep(f"resp_{n}", {"n": n}, LATER)
    keeper.close()
    assert [store.get_response(f"resp_{n}") for n in range(5)] == [{"n": n} for n in range(5)]
    keeper.keep("late", {"n": 9}, LATER)  # after close: written by the caller
    assert store.get_response("late") == {"n": 9}


def test_threads_keeping_reading_and_deleting_agree_with_the_store(store, keeper) -> None:
    ids = [f"resp_{n}" for n in range(40)]
    locks = {response_id: threading.Lock() for response_id in ids}
    model: dict[str, dict[str, Any] | None] = dict.fromkeys(ids)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for step in range(300):
            response_id = rng.choice(ids)
            with locks[response_id]:  # one operation per id at a time: the model stays exact
                action = rng.random()
                if action < 0.45:
                    doc = {"seed": seed, "step": step}
                    keeper.keep(response_id, doc, LATER)
                    model[response_id] = doc
                elif action < 0.7:
                    deleted = keeper.delete(response_id)
                    if deleted != (model[response_id] is not None):
                        errors.append(f"delete {response_id}: {deleted}, expected {model[response_id] is not None}")
                    model[response_id] = None
                elif (found := keeper.get(response_id)) != model[response_id]:
                    errors.append(f"get {response_id}: {found}, expected {model[response_id]}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert keeper.flush(WAIT)
    assert {response_id: store.get_response(response_id) for response_id in ids} == model


def test_responses_kept_together_are_written_in_one_batch(store, keeper) -> None:
    batches: list[int] = []
    write = store.put_responses
    store.put_responses = lambda responses: (batches.append(len(responses)), write(responses))  # type: ignore[method-assign]
    for n in range(5):
        keeper.keep(f"resp_{n}", {"n": n}, LATER)
    assert keeper.flush(WAIT)
    assert batches == [5]
    assert [store.get_response(f"resp_{n}") for n in range(5)] == [{"n": n} for n in range(5)]


class LandingStore(GatedStore):
    """Another process's batch lands between a first lookup that misses and the next."""

    def get_response(self, response_id: str) -> dict[str, Any] | None:
        found = super().get_response(response_id)
        if found is None and response_id == "elsewhere":
            SQLiteStore.put_responses(self, [("elsewhere", {"by": "another worker"}, LATER)])
        return found


@pytest.mark.parametrize("shared", [True, False])
def test_a_shared_store_is_looked_up_again_before_a_miss(tmp_path: Path, shared: bool) -> None:
    store = LandingStore(tmp_path)
    keeper = ResponseKeeper(store, shared=shared)
    try:
        assert keeper.get("elsewhere") == ({"by": "another worker"} if shared else None)
        assert keeper.get("nowhere") is None
    finally:
        keeper.close()
        store.close()
