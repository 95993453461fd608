"""What a request reads never waits behind a write in progress: a real store of each backend.

A write can take long (the disk, or up to the busy timeout while ``mlstream keys``
in another process holds SQLite's write lock). Every request reads the store's
change counter (API keys) and the cluster settings; neither may wait for it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from mlstream.store.cluster import ClusterSettings
from mlstream.settings.server import STREAM_ENABLED, ServerSettings
from mlstream.store.sqlite import Record

from ..support.stores import StoreFactory
from ..support.timeouts import HANG_GUARD


def returns_while(blocker: Callable[[threading.Event, threading.Event], None], call: Callable[[], Any]) -> Any:
    """Run ``blocker`` in a thread until it signals it is inside the write, then ``call``
    in another thread, which must return while the write is still held open."""
    inside, release = threading.Event(), threading.Event()
    writer = threading.Thread(target=blocker, args=(inside, release), daemon=True)
    writer.start()
    try:
        assert inside.wait(HANG_GUARD)
        result: list[Any] = []
        done = threading.Event()

        def run() -> None:
            result.append(call())
            done.set()

        threading.Thread(target=run, daemon=True).start()
        assert done.wait(HANG_GUARD), "the read waited for the write to end"
        return result[0]
    finally:
        release.set()
        writer.join(HANG_GUARD)


def test_reads_and_the_change_counter_do_not_wait_for_an_open_transaction(make_store: StoreFactory) -> None:
    store = make_store()
    store.put("apikey", Record("k1", {"name": "one"}, "hash"))
    counter = store.change_counter()

    def slow_write(inside: threading.Event, release: threading.Event) -> None:
        with store.transaction():
            store.put("apikey", Record("k2", {"name": "two"}, "hash2"))
            inside.set()
            assert release.wait(HANG_GUARD)
            raise_to_roll_back()

    def raise_to_roll_back() -> None:
        raise LookupError("roll back")

    def rolled_back(inside: threading.Event, release: threading.Event) -> None:
        try:
            slow_write(inside, release)
        except LookupError:
            pass

    assert returns_while(rolled_back, store.change_counter) == counter
    assert [r.id for r in returns_while(rolled_back, lambda: store.scan("apikey"))] == ["k1"]  # committed only
    assert returns_while(rolled_back, lambda: store.get("apikey", "k2")) is None
    store.put("apikey", Record("k2", {"name": "two"}, "hash2"))
    assert store.change_counter() != counter  # this process's own commits move it too
    assert [r.id for r in store.scan("apikey")] == ["k1", "k2"]


def test_a_transaction_reads_its_own_writes(make_store: StoreFactory) -> None:
    store = make_store()
    with store.transaction():
        store.put("task", Record("t1", {"state": "CREATED"}))
        assert store.get("task", "t1") is not None
        assert [r.id for r in store.scan("task")] == ["t1"]
    try:
        with store.transaction():
            store.delete("task", "t1")
            assert store.get("task", "t1") is None
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert store.get("task", "t1") is not None


class SlowSettings:
    """A real store whose settings write signals its start and waits to be let go."""

    inside: threading.Event
    release: threading.Event

    def put_settings(self, values: dict[str, Any]) -> None:
        self.inside.set()
        assert self.release.wait(HANG_GUARD)
        super().put_settings(values)  # type: ignore[misc]


def test_cluster_settings_are_read_while_an_update_writes(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(SlowSettings)
    cluster = ClusterSettings(store, ServerSettings(port=0, data_dir=tmp_path))

    def slow_update(inside: threading.Event, release: threading.Event) -> None:
        store.inside, store.release = inside, release
        cluster.update({"persistent": {STREAM_ENABLED: False}})

    assert returns_while(slow_update, lambda: cluster.stream_enabled) is True
    assert cluster.stream_enabled is False
