"""The Store contract, run against both backends; then what only PostgreSQL adds
(migrations under a lock, changes heard across processes, a master key shared by all)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from mlstream.store import postgres as store_postgres
from mlstream.access.credentials import open_codec
from mlstream.errors import CredentialError, StoreError
from mlstream.settings.server import MASTER_KEY_ENV
from mlstream.store.sqlite import Record
from mlstream.store.postgres import MIGRATIONS, PostgresStore
from mlstream.usage.records import UsageRecord

from ..support.stores import StoreFactory, wait_for_counter_move
from ..support.timeouts import HANG_GUARD


def test_records_keep_their_order_their_document_and_their_secret(make_store: StoreFactory) -> None:
    store = make_store()
    store.put("connector", Record("b", {"name": "first", "nested": {"z": 1, "a": [1, 2]}}, "v1:sealed"))
    store.put("connector", Record("a", {"name": "second"}))
    store.put("connector", Record("b", {"name": "first, renamed"}, None))  # replacing keeps its place
    assert [(r.id, r.doc, r.secret) for r in store.scan("connector")] == [
        ("b", {"name": "first, renamed"}, None), ("a", {"name": "second"}, None)]
    assert store.get("connector", "a") == Record("a", {"name": "second"})
    assert store.get("model", "a") is None  # kinds are apart
    assert store.delete("connector", "a") is True
    assert store.delete("connector", "a") is False
    with pytest.raises(ValueError):
        store.get("nonsense", "a")


def test_settings_are_set_replaced_and_removed(make_store: StoreFactory) -> None:
    store = make_store()
    store.put_settings({"a.b": True, "c": {"x": [1]}})
    store.put_settings({"a.b": None, "c": 5})
    assert store.get_settings() == {"c": 5}


def test_nested_transactions_join_and_roll_back_together(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.put("task", Record("t1", {}))
            with store.transaction():
                store.put("task", Record("t2", {}))
            raise RuntimeError("roll back both")
    assert store.scan("task") == []


def test_writers_take_turns_so_a_check_holds_until_commit(make_store: StoreFactory) -> None:
    """Two processes' worth of stores on one location: a second writer waits for the first."""
    first, second = make_store(), make_store()
    inside, release, second_done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with first.transaction():
            assert first.get("model", "m") is None  # the check ...
            inside.set()
            assert release.wait(HANG_GUARD)
            first.put("model", Record("m", {"by": "first"}))  # ... still true when acting on it

    def write() -> None:
        second.put("model", Record("m", {"by": "second"}))
        second_done.set()

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(HANG_GUARD)
    writer = threading.Thread(target=write)
    writer.start()
    assert not second_done.wait(0.3)  # blocked behind the open transaction
    release.set()
    holder.join(HANG_GUARD)
    writer.join(HANG_GUARD)
    assert second.get("model", "m").doc == {"by": "second"}


def test_a_write_by_another_process_moves_the_change_counter(make_store: StoreFactory) -> None:
    mine, theirs = make_store(), make_store()
    before = mine.change_counter()
    theirs.put("apikey", Record("k", {"role": "admin"}, "hash"))
    assert wait_for_counter_move(mine, before, HANG_GUARD)
    assert mine.get("apikey", "k") is not None


def test_a_rate_limit_bucket_is_shared_by_every_process_on_the_store(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    per_second = 3 / 60  # 3 per minute: no refill to speak of during the test
    waits = [store.take_token("m|3|MINUTES", 3.0, per_second) for store in (first, second, first, second)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert 19.0 < waits[3] <= 20.0  # a token every 20 s
    assert first.take_token("m|4|MINUTES", 4.0, 4 / 60) == 0.0  # another limit, another bucket


def test_concurrent_takes_never_hand_out_more_than_the_bucket_holds(make_store: StoreFactory) -> None:
    stores = [make_store() for _ in range(2)]
    taken: list[bool] = []
    lock = threading.Lock()  # guards taken

    def hammer(store) -> None:
        for _ in range(10):
            wait = store.take_token("busy", 5.0, 5 / 3600)
            with lock:
                taken.append(wait == 0.0)

    threads = [threading.Thread(target=hammer, args=(stores[i % 2],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
    assert len(taken) == 40 and sum(taken) == 5


def test_the_master_key_must_be_the_stores(make_store: StoreFactory, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU=")
    open_codec(make_store(), tmp_path)
    open_codec(make_store(), tmp_path)  # the same key again: fine
    monkeypatch.setenv(MASTER_KEY_ENV, "WllYV1ZVVFNSUVBPTk1MS0pJSEdGRURDQkE1NDMyMTA=")
    with pytest.raises(CredentialError, match="not the one"):
        open_codec(make_store(), tmp_path)


# --- PostgreSQL only ---------------------------------------------------------------

def test_instances_starting_together_apply_each_migration_once(postgres_url: str) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stores.append(PostgresStore(postgres_url))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD * 2)
    try:
        assert not errors
        with psycopg.connect(postgres_url) as conn:
            versions = [row[0] for row in conn.execute("SELECT version FROM mlstream_schema_migrations")]
        assert sorted(versions) == [version for version, _ in MIGRATIONS]
    finally:
        for store in stores:
            store.close()


def test_every_relation_mlstream_creates_reads_as_rows(postgres_url: str) -> None:
    """A generic tool reads any relation whole, e.g. ``SELECT row_to_json(t) FROM rel t``:
    a column named like the alias would be taken for it (PostgreSQL resolves an
    unqualified name as a column first), as the usage window's ``t`` once was."""
    store = PostgresStore(postgres_url)
    try:
        store.put("connector", Record("c", {"name": "x"}, "v1:sealed"))
        store.put_settings({"a": 1})
        store.take_token("bucket", 5, 1)
        tables = store.usage()
        tables.write([UsageRecord(1, "k", "n", "m", "i", "r", 200, "ok", 10, 5, 0, False, 1.5, 2.0, 0.1, "q")],
                     {("k", 0): 0.1}, {"k": 15})
        tables.take_request("k", 10)
        store.put_responses([("resp", {"id": "resp"}, time.time() + 60)])
    finally:
        store.close()
    with psycopg.connect(postgres_url) as conn:
        relations = [row[0] for row in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1")]
        assert {"mlstream_schema_migrations", "mlstream_connector", "mlstream_usage_window",
                "mlstream_usage_record", "mlstream_response"} <= set(relations), relations
        assert all(name.startswith("mlstream_") for name in relations), relations  # a fresh database: all ours
        for name in relations:
            rows = conn.execute(f"SELECT row_to_json(t) FROM {name} t").fetchall()
            assert len(rows) == conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0], name
        window = [row[0] for row in conn.execute("SELECT row_to_json(t) FROM mlstream_usage_window t")]
        assert {row["kind"] for row in window} == {"r", "t"}


def test_a_database_from_a_newer_mlstream_is_refused(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO mlstream_schema_migrations (version) VALUES (999)")
    with pytest.raises(StoreError, match="newer than this mlstream knows"):
        PostgresStore(postgres_url)


def test_credentials_reach_the_database_sealed(postgres_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU=")
    store = PostgresStore(postgres_url)
    try:
        codec = open_codec(store, tmp_path)
        store.put("connector", Record("c", {"name": "x"}, codec.seal({"openAI_key": "sk-very-secret"})))
    finally:
        store.close()
    with psycopg.connect(postgres_url) as conn:
        dump = repr(conn.execute("SELECT * FROM mlstream_connector").fetchall())
    assert "sk-very-secret" not in dump and "v1:" in dump


def test_an_unreachable_database_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pool tries again until 2 x CONNECT_TIMEOUT; 1 s (libpq takes whole seconds) is as clear
    monkeypatch.setattr(store_postgres, "CONNECT_TIMEOUT", 1)
    url = f"postgresql://nobody@/none?host={tmp_path}"  # a socket directory with no server
    with pytest.raises(StoreError, match="unreachable") as caught:
        PostgresStore(url)
    assert caught.value.http_status == 503


def test_a_request_reads_the_sqlite_change_counter_once(tmp_path: Path) -> None:
    """Inside one_counter_reading a thread reads the counter once (a request sees the
    store as of its first look); its own write, the block's end, and other threads
    read afresh."""
    from mlstream.store.sqlite import SQLiteStore

    mine, theirs = SQLiteStore(tmp_path), SQLiteStore(tmp_path)
    try:
        with mine.one_counter_reading():
            pinned = mine.change_counter()
            theirs.put("apikey", Record("a", {"role": "user"}, "h1"))   # another process writes
            assert mine.change_counter() == pinned
            seen_elsewhere: list[int] = []
            other = threading.Thread(target=lambda: seen_elsewhere.append(mine.change_counter()))
            other.start()
            other.join(HANG_GUARD)
            assert seen_elsewhere and seen_elsewhere[0] != pinned     # not pinned on that thread
            mine.put("apikey", Record("b", {"role": "user"}, "h2"))    # this thread writes
            after_write = mine.change_counter()
            assert after_write != pinned
            theirs.put("apikey", Record("c", {"role": "user"}, "h3"))
            assert mine.change_counter() == after_write
        assert mine.change_counter() != after_write                   # the block is over
    finally:
        mine.close()
        theirs.close()
