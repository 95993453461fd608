"""The usage tables, the recorder and the admission checks on real stores (SQLite and
PostgreSQL): records add up across processes, survive a reopen, budgets and rpm/tpm hold."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from mlstream.access.keys import ApiKey, Caller, KeyStore
from mlstream.access.tenants import DEFAULT
from mlstream.access.budgets import Accountant
from mlstream.access.controllers import Controllers
from mlstream.errors import (
    BudgetExceeded,
    Conflict,
    NotFound,
    Overloaded,
    RateLimited,
    StoreUnavailable,
)
from mlstream.metrics import Metrics
from mlstream.usage.limits import RateLimiter
from mlstream.store.sqlite import Record, SQLiteStore
from mlstream.store.postgres import MIGRATIONS, PostgresStore
from mlstream.usage.records import DAY_MS, KeyLimits, UsageQuery, UsageRecord, period_bounds
from mlstream.usage.recorder import UsageRecorder
from mlstream.usage.tables import POSTGRES_SCHEMA, RESERVATION_SECONDS, SQLiteUsage, UsageTables

T0 = 1_764_633_600_000  # 2025-12-02T00:00:00Z
HOUR = 3_600_000

from ..support.pools import StubPool
from ..support.stores import fresh_database
from ..support.timeouts import HANG_GUARD


def rec(key: str = "k1", model: str = "m1", *, t: int = T0, inp: int = 10, out: int = 5, cached: int = 0,
        cost: float | None = None, outcome: str = "ok", status: int = 200, interface: str = "openai/v1/chat/completions",
        estimated: bool = False) -> UsageRecord:
    return UsageRecord(t, key, f"name-{key}", model, interface, "/route", status, outcome, inp, out, cached,
                       estimated, 1.5, 20.0, cost, f"req-{t}")


class Parts:
    """What the server wires together, for one store (one "process")."""

    def __init__(self, store) -> None:
        self.store = store
        self.tables = store.usage()
        self.metrics = Metrics(StubPool())
        self.recorder = UsageRecorder(self.tables, self.metrics)
        self.controllers = Controllers(store, RateLimiter(store))
        self.accountant = Accountant(self.tables, self.recorder, self.metrics, self.controllers)

    def close(self) -> None:
        self.recorder.close()


@pytest.fixture
def parts(make_store):
    made: list[Parts] = []

    def make() -> Parts:
        made.append(Parts(make_store()))
        return made[-1]

    yield make
    for p in made:
        p.close()


def key(name: str = "alice", **limits: Any) -> Caller:
    return Caller(ApiKey(f"id-{name}", name, "user", 0, KeyLimits(**limits)), DEFAULT)


# --- tables -----------------------------------------------------------------------------------------

def test_records_are_summed_grouped_and_listed_newest_first(parts):
    p = parts()
    records = [rec("k1", "m1", t=T0, inp=10, out=5, cached=2, cost=0.5),
               rec("k1", "m2", t=T0 + HOUR, inp=1, out=1, cost=None),
               rec("k2", "m1", t=T0 + 25 * HOUR, inp=100, out=50, cost=1.0, outcome="error", status=502),
               rec("k2", "m1", t=T0 + 26 * HOUR, inp=7, out=0, outcome="client_gone", estimated=True)]
    p.tables.write(records, {}, {})
    everything = UsageQuery(T0, T0 + 48 * HOUR)
    rows, totals = p.tables.summarize(UsageQuery(T0, T0 + 48 * HOUR, group_by=("key", "model")))
    assert [(g["key"], g["model"], s.requests, s.input_tokens, s.output_tokens, s.cost) for g, s in rows] == [
        ("name-k1", "m1", 1, 10, 5, 0.5), ("name-k1", "m2", 1, 1, 1, None), ("name-k2", "m1", 2, 107, 50, 1.0)]
    assert (totals.requests, totals.errors, totals.input_tokens, totals.cached_input_tokens, totals.cost) == (
        4, 1, 118, 2, 1.5)
    days, _ = p.tables.summarize(UsageQuery(T0, T0 + 48 * HOUR, group_by=("day", "outcome")))
    assert [(g["day"], g["outcome"], s.requests) for g, s in days] == [
        (T0, "ok", 2), (T0 + 24 * HOUR, "client_gone", 1), (T0 + 24 * HOUR, "error", 1)]
    hours, _ = p.tables.summarize(UsageQuery(T0, T0 + 2 * HOUR, group_by=("hour",)))
    assert [(g["hour"], s.requests) for g, s in hours] == [(T0, 1), (T0 + HOUR, 1)]
    listed = p.tables.records(everything)
    assert listed == sorted(records, key=lambda r: -r.time_ms)
    assert p.tables.records(UsageQuery(T0, T0 + 48 * HOUR, key_name="name-k2", size=1)) == [records[3]]
    assert p.tables.records(UsageQuery(T0, T0 + 48 * HOUR, key_id="k1", model_id="m2")) == [records[1]]
    # [from, to): a record at `to` is outside
    assert p.tables.summarize(UsageQuery(T0 + 1, T0 + HOUR))[1].requests == 0


def test_records_survive_a_reopen_and_two_processes_add_up(make_store):
    first, second = make_store(), make_store()  # two processes (or instances) on one store
    one, two = UsageRecorder(first.usage()), UsageRecorder(second.usage())
    for i in range(50):
        (one if i % 2 else two).record(rec(t=T0 + i, cost=0.01))
    one.close()
    two.close()
    first.close()
    reopened = make_store()
    rows, totals = reopened.usage().summarize(UsageQuery(T0, T0 + HOUR))
    assert totals.requests == 50 and totals.cost == pytest.approx(0.5)
    assert reopened.usage().spent("k1", T0, T0 + 24 * HOUR) == pytest.approx(0.5)


def test_usage_writes_do_not_move_the_change_counter(make_store):
    store = make_store()
    store.put("meta", Record("x", {}))
    before = store.change_counter()
    store.usage().write([rec()], {("k1", T0): 1.0}, {"k1": 5})
    store.usage().take_request("k1", 10)
    assert store.change_counter() == before


# --- the recorder -------------------------------------------------------------------------------------------

class FailingTables(UsageTables):
    """Refuses every write until told otherwise (a store that is down)."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.written: list[UsageRecord] = []

    def _transaction(self, lock_key=None):
        raise AssertionError("unused")

    def _read(self, sql, params):
        return []

    def write(self, records, spend, tokens, now=None, released=()):
        if not self.up.is_set():
            raise StoreUnavailable("down")
        self.written += records

    def close(self):
        pass


def test_a_full_queue_drops_records_counts_them_and_keeps_their_charges(monkeypatch):
    monkeypatch.setattr("mlstream.usage.recorder.QUEUE_RECORDS", 5)
    tables, metrics = FailingTables(), Metrics(StubPool())
    recorder = UsageRecorder(tables, metrics)
    try:
        accepted = [recorder.record(rec(t=T0 + i, cost=1.0, inp=1, out=1)) for i in range(8)]
        assert accepted == [True] * 5 + [False] * 3
        assert "mlstream_usage_records_dropped_total 3" in metrics.render()
        spend, tokens, _ = recorder.pending("k1", T0, T0 + 24 * HOUR)
        assert (spend, tokens) == (8.0, 16)  # every call charged, dropped or not
        tables.up.set()
        assert recorder.flush(5)
        assert [r.time_ms for r in tables.written] == [T0 + i for i in range(5)]  # in order, none twice
    finally:
        tables.up.set()
        recorder.close()


def test_close_writes_what_was_queued_while_the_store_was_down():
    tables = FailingTables()
    recorder = UsageRecorder(tables)
    for i in range(20):
        recorder.record(rec(t=T0 + i))
    time.sleep(0.1)  # the writer has failed at least once
    threading.Timer(0.2, tables.up.set).start()
    recorder.close()
    assert len(tables.written) == 20


def test_record_never_blocks_while_the_writer_is_stuck():
    class Stuck(FailingTables):
        def write(self, records, spend, tokens, now=None, released=()):
            self.up.wait(5)
            self.written += records

    tables = Stuck()
    recorder = UsageRecorder(tables)
    try:
        started = time.monotonic()
        for i in range(2000):
            recorder.record(rec(t=T0 + i))
        assert time.monotonic() - started < 1.0
    finally:
        tables.up.set()
        recorder.close()
    assert len(tables.written) == 2000


# --- admission: budgets, tpm, rpm ---------------------------------------------------------------------------

def test_a_spent_budget_refuses_the_next_call_until_the_period_ends(parts):
    p = parts()
    alice, bob = key("alice", budget=1.0, budget_period="day"), key("bob", budget=1.0, budget_period="day")
    admission = p.accountant.admit(alice, "m1")
    p.accountant.record(admission.usage(interface="i", route="r", status=200, outcome="ok", input_tokens=10,
                                        cost=0.6))
    p.accountant.record(p.accountant.admit(alice, "m1").usage(interface="i", route="r", status=200,
                                                                outcome="ok", cost=0.6))
    with pytest.raises(BudgetExceeded) as refused:
        p.accountant.admit(alice, "m1")
    _, end = period_bounds("day", int(time.time() * 1000))
    retry = int(refused.value.headers["Retry-After"])
    assert abs(retry - (end / 1000 - time.time())) <= 2
    assert refused.value.to_body()["error"]["type"] == "budget_exceeded"
    p.accountant.admit(bob, "m1")  # another key goes on
    # committed, the spend is seen by another process on the store
    assert p.recorder.flush(5)
    other = parts()
    with pytest.raises(BudgetExceeded):
        other.accountant.admit(alice, "m1")


@pytest.mark.parametrize("period, now, later", [
    ("day", "2025-12-02T23:59:00", "2025-12-03T00:00:01"),
    ("week", "2025-12-07T23:00:00", "2025-12-08T00:00:01"),   # Sunday, then Monday
    ("month", "2025-12-31T12:00:00", "2026-01-01T00:00:01"),
])
def test_a_budget_renews_when_its_period_ends(make_store, period, now, later):
    from datetime import datetime, timezone

    clock = [datetime.fromisoformat(now).replace(tzinfo=timezone.utc).timestamp()]
    store = make_store()
    tables = store.usage()
    recorder = UsageRecorder(tables)
    accountant = Accountant(tables, recorder, Metrics(StubPool()), Controllers(store, RateLimiter()),
                            clock=lambda: clock[0])
    try:
        alice = key("alice", budget=1.0, budget_period=period)
        accountant.record(accountant.admit(alice, "m1").usage(interface="i", route="r", status=200, outcome="ok",
                                                              cost=1.5))
        with pytest.raises(BudgetExceeded) as refused:
            accountant.admit(alice, "m1")
        end = datetime.fromisoformat(later).replace(tzinfo=timezone.utc).timestamp() - 1
        assert int(refused.value.headers["Retry-After"]) == pytest.approx(end - clock[0], abs=1)
        clock[0] = datetime.fromisoformat(later).replace(tzinfo=timezone.utc).timestamp()
        accountant.admit(alice, "m1")  # a new period, a new budget
    finally:
        recorder.close()


def test_a_model_without_pricing_never_spends_a_budget(parts):
    p = parts()
    alice = key("alice", budget=0.000001)
    for _ in range(3):
        p.accountant.record(p.accountant.admit(alice, "m1").usage(interface="i", route="r", status=200,
                                                                    outcome="ok", input_tokens=10**6, cost=None))


def test_tpm_counts_reported_tokens_of_the_last_minute(parts):
    p = parts()
    alice = key("alice", tpm=100)
    p.accountant.record(p.accountant.admit(alice, "m1").usage(interface="i", route="r", status=200,
                                                                outcome="ok", input_tokens=60, output_tokens=39))
    p.accountant.admit(alice, "m1")  # 99 < 100
    p.accountant.record(p.accountant.admit(alice, "m1").usage(interface="i", route="r", status=200,
                                                                outcome="ok", input_tokens=1))
    with pytest.raises(RateLimited) as refused:
        p.accountant.admit(alice, "m1")
    assert refused.value.to_body()["error"]["type"] == "rate_limited"
    assert 1 <= int(refused.value.headers["Retry-After"]) <= 61
    assert p.recorder.flush(5)
    with pytest.raises(RateLimited):
        parts().accountant.admit(alice, "m1")  # another process sees the committed tokens


def test_tpm_window_slides(parts):
    tables = parts().tables
    tables.write([], {}, {"k": 50}, now=1000.0)
    assert tables.window_tokens("k", now=1030.0)[0] == 50
    assert tables.window_tokens("k", now=1060.5)[0] == 0


# --- the schema of older releases ---------------------------------------------------------------

# usage.db as mlstream wrote it before issue 42: the window's times in a column "t"
# (which PostgreSQL's row_to_json(t) took for the alias), renamed time_s since.
OLD_SQLITE_SCHEMA = (
    "CREATE TABLE usage_record (seq INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, key_id TEXT NOT NULL,"
    " key_name TEXT NOT NULL, model_id TEXT NOT NULL, interface TEXT NOT NULL, route TEXT NOT NULL, status INTEGER"
    " NOT NULL, outcome TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
    " cached_input_tokens INTEGER NOT NULL, estimated INTEGER NOT NULL, first_token_ms REAL, duration_ms REAL NOT NULL,"
    " cost REAL, request_id TEXT NOT NULL)",
    "CREATE INDEX usage_record_time ON usage_record (time_ms)",
    "CREATE INDEX usage_record_key ON usage_record (key_id, time_ms)",
    "CREATE TABLE usage_spend (key_id TEXT NOT NULL, day_ms INTEGER NOT NULL, cost REAL NOT NULL,"
    " PRIMARY KEY (key_id, day_ms))",
    "CREATE TABLE usage_window (key_id TEXT NOT NULL, kind TEXT NOT NULL, t REAL NOT NULL, amount REAL NOT NULL)",
    "CREATE INDEX usage_window_key ON usage_window (key_id, kind, t)",
    "CREATE INDEX usage_window_time ON usage_window (t)",
)
OLD_WINDOW_ROWS = "INSERT INTO usage_window (key_id, kind, t, amount) VALUES ('k', 't', {0}, 40), ('k', 'r', {0}, 1)"


# A record written before tenants (issue 39): no tenant column.
OLD_RECORD_ROW = ("INSERT INTO usage_record (time_ms, key_id, key_name, model_id, interface, route, status, outcome,"
                  " input_tokens, output_tokens, cached_input_tokens, estimated, first_token_ms, duration_ms, cost,"
                  " request_id) VALUES ({0}, 'old', 'old-key', 'm', 'i', 'r', 200, 'ok', 3, 4, 0, {1}, NULL, 1.0, 0.5,"
                  " 'req-old')")


def check_the_old_record_is_the_default_tenants(tables: UsageTables, now: float) -> None:
    window = UsageQuery(int(now * 1000) - 1000, int(now * 1000) + 100_000, key_id="old")
    assert [(r.request_id, r.tenant) for r in tables.records(window)] == [("req-old", "default")]
    by_tenant, _ = tables.summarize(UsageQuery(window.from_ms, window.to_ms, group_by=("tenant",)))
    assert [(groups["tenant"], sums.requests) for groups, sums in by_tenant] == [("default", 1)]


def check_the_old_windows_count(tables: UsageTables, now: float) -> None:
    """The rows written under the old schema still count, and new ones go in beside them."""
    assert tables.window_tokens("k", now=now + 1)[0] == 40
    assert tables.take_request("k", 1, now=now + 1) > 0  # the old request fills the rpm of 1
    assert tables.take_request("k", 2, now=now + 1) == 0.0
    tables.write([rec("k")], {("k", 0): 0.5}, {"k": 2}, now=now + 2)
    assert tables.window_tokens("k", now=now + 3)[0] == 42
    assert tables.window_tokens("k", now=now + 61)[0] == 2  # the old row left the window


def test_a_usage_db_of_the_old_schema_is_upgraded_in_place(tmp_path):
    now = time.time()
    with sqlite3.connect(tmp_path / SQLiteUsage.FILENAME) as db:
        for sql in OLD_SQLITE_SCHEMA:
            db.execute(sql)
        db.execute(OLD_WINDOW_ROWS.format(now))
        db.execute(OLD_RECORD_ROW.format(int(now * 1000), 0))
    for reopened in range(2):  # upgraded once; opening it again finds nothing to do
        store = SQLiteStore(tmp_path)
        try:
            if not reopened:
                check_the_old_windows_count(store.usage(), now)
            else:
                assert store.usage().window_tokens("k", now=now + 3)[0] == 42
            check_the_old_record_is_the_default_tenants(store.usage(), now)
        finally:
            store.close()
    with sqlite3.connect(tmp_path / SQLiteUsage.FILENAME) as db:
        assert [row[1] for row in db.execute("PRAGMA table_info(usage_window)")] == ["key_id", "kind", "time_s",
                                                                                     "amount"]
        indexed = {row[0]: row[1] for row in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                                                        " AND tbl_name = 'usage_window'")}
        assert indexed == {"usage_window_key": "CREATE INDEX usage_window_key ON usage_window (key_id, kind, time_s)",
                           "usage_window_time": "CREATE INDEX usage_window_time ON usage_window (time_s)"}


def test_a_postgresql_database_of_the_old_schema_is_upgraded_by_a_migration(postgres_url):
    """A database as the releases before issue 42 left it (migrations 1 to 5, as they were
    and are: migrations never change) is migrated at start, its windows and records kept
    (a record from before tenants is the default tenant's)."""
    now = time.time()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE mlstream_schema_migrations ("
                     " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for version, statements in MIGRATIONS:
            if version <= 5:
                for sql in statements:
                    conn.execute(sql)
                conn.execute("INSERT INTO mlstream_schema_migrations (version) VALUES (%s)", (version,))
        assert "t" in postgres_columns(conn, "mlstream_usage_window")  # the old shape
        conn.execute(f"INSERT INTO mlstream_usage_window (key_id, kind, t, amount) VALUES ('k', 't', {now}, 40),"
                     f" ('k', 'r', {now}, 1)")
        conn.execute(OLD_RECORD_ROW.replace("INTO usage_record", "INTO mlstream_usage_record")
                     .format(int(now * 1000), "false"))
    store = PostgresStore(postgres_url)
    try:
        check_the_old_windows_count(store.usage(), now)
        check_the_old_record_is_the_default_tenants(store.usage(), now)
    finally:
        store.close()
    with psycopg.connect(postgres_url) as conn:
        assert postgres_columns(conn, "mlstream_usage_window") == ["key_id", "kind", "time_s", "amount"]
        assert len(conn.execute("SELECT row_to_json(t) FROM mlstream_usage_window t").fetchall()) == 4


def test_the_migrations_end_at_the_usage_schema_the_code_declares(postgres_server):
    """A database migrated from nothing has the usage tables ``POSTGRES_SCHEMA`` creates (a
    change to the schema comes with a migration to it)."""
    migrated, declared = fresh_database(postgres_server), fresh_database(postgres_server)
    PostgresStore(migrated).close()
    with psycopg.connect(declared, autocommit=True) as conn:
        for sql in POSTGRES_SCHEMA:
            conn.execute(sql)
    shapes = []
    for url in (migrated, declared):
        with psycopg.connect(url) as conn:
            shapes.append((
                conn.execute("SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns"
                             " WHERE table_name LIKE 'mlstream_usage_%' ORDER BY 1, ordinal_position").fetchall(),
                conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'mlstream_usage_%'"
                             " ORDER BY 1").fetchall()))
    assert shapes[0] == shapes[1] and shapes[0][0]


def postgres_columns(conn: Any, table: str) -> list[str]:
    return [row[0] for row in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                                           " ORDER BY ordinal_position", (table,))]


def test_rpm_is_a_sliding_window(parts):
    tables = parts().tables
    assert [tables.take_request("k", 2, now=t) for t in (1000.0, 1010.0)] == [0.0, 0.0]
    assert tables.take_request("k", 2, now=1020.0) == pytest.approx(40.0)
    assert tables.take_request("k", 2, now=1060.5) == 0.0  # the first left the window


@pytest.mark.parametrize("round_", range(3))
def test_rpm_is_exact_under_concurrency_across_processes(parts, round_):
    """Threads of two "processes" race for one key's rpm: exactly rpm get through."""
    a, b = parts(), parts()
    rpm = 25
    alice = key(f"alice{round_}", rpm=rpm)
    admitted, refused = [], []

    def call(accountant: Accountant) -> None:
        try:
            accountant.admit(alice, "m1")
            admitted.append(1)
        except RateLimited:
            refused.append(1)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(call, [a.accountant if i % 2 else b.accountant for i in range(60)]))
    assert (len(admitted), len(refused)) == (rpm, 60 - rpm)


def test_tpm_under_concurrent_calls_refuses_once_the_window_is_full(parts):
    """Concurrent calls may together pass tpm (tokens are known at their end), but once
    reported, every next call is refused."""
    p = parts()
    alice = key("alice", tpm=1000)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def call() -> None:
        barrier.wait()
        for _ in range(10):
            try:
                admission = p.accountant.admit(alice, "m1")
            except RateLimited:
                results.append("refused")
                continue
            p.accountant.record(admission.usage(interface="i", route="r", status=200, outcome="ok",
                                                input_tokens=40, output_tokens=10))
            results.append("ok")

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = results.count("ok")
    assert 20 <= admitted <= 20 + 8  # 1000 / 50 = 20, plus at most one in flight per thread
    with pytest.raises(RateLimited):
        p.accountant.admit(alice, "m1")


def test_no_key_is_admitted_as_dash_and_records_are_charged_to_nobody(parts):
    p = parts()
    admission = p.accountant.admit(None, "m1")
    assert (admission.key_id, admission.key_name) == ("-", "-")
    p.accountant.record(admission.usage(interface="i", route="r", status=200, outcome="ok", cost=1.0))
    assert p.recorder.pending("-", 0, 2**62)[:2] == (0.0, 0)


# --- keys --------------------------------------------------------------------------------------------------

def test_keys_have_unique_names_and_partial_updates(make_store):
    keys = KeyStore(make_store())
    alice, _ = keys.create("user", "alice", KeyLimits(5.0, "month", 1000, 60))
    with pytest.raises(Conflict):
        keys.create("admin", "alice")
    updated = keys.update("alice", {"rpm": 10, "budget": None})
    assert updated.limits == KeyLimits(None, "month", 1000, 10) and updated.role == "user"
    assert keys.get("alice") == updated
    assert keys.get(alice.key_id) == updated  # by id too
    keys.delete("alice")
    with pytest.raises(NotFound):
        keys.get("alice")


# --- controllers -------------------------------------------------------------------------------------------

def test_controller_limits_a_user_on_a_model(make_store):
    store = make_store()
    store.put("model", Record("m1", {"name": "m"}))
    controllers = Controllers(store, RateLimiter(store))
    with pytest.raises(NotFound):
        controllers.create("nope", {"user_rate_limiter": {"alice": {"limit": 1, "unit": "MINUTES"}}})
    with pytest.raises(Conflict):
        controllers.update("m1", {"user_rate_limiter": {"alice": {"limit": 2}}})
    assert controllers.create("m1", {"user_rate_limiter": {"alice": {"limit": 2, "unit": "MINUTES"}}}) == {
        "model_id": "m1", "status": "CREATED"}
    controllers.check("m1", "alice")
    controllers.check("m1", "alice")
    with pytest.raises(Overloaded, match="throttled at user level"):
        controllers.check("m1", "alice")
    controllers.check("m1", "bob")  # not named: unlimited
    controllers.check("m1", None)
    controllers.update("m1", {"user_rate_limiter": {"bob": {"limit": "1", "unit": "HOURS"}}})
    assert controllers.get("m1")["user_rate_limiter"] == {"alice": {"limit": "2", "unit": "MINUTES"},
                                                          "bob": {"limit": "1", "unit": "HOURS"}}
    controllers.check("m1", "bob")
    with pytest.raises(Overloaded):
        controllers.check("m1", "bob")
    controllers.delete("m1")
    controllers.check("m1", "bob")  # no controller, no limit
    with pytest.raises(NotFound):
        controllers.get("m1")


# --- budget reservations ---------------------------------------------------------------------------

def test_a_reservation_counts_until_its_record_is_written_then_the_cost_does(make_store):
    tables = make_store().usage()
    day = 0
    assert tables.reserve("s", 10.0, day, DAY_MS, 0.0, 4.0, "r1", now=1.0) is None
    assert tables.reserve("s", 10.0, day, DAY_MS, 0.0, 4.0, "r2", now=1.0) is None
    assert tables.reserve("s", 10.0, day, DAY_MS, 0.0, 4.0, "r3", now=1.0) is None  # 8 < 10: let through
    assert tables.reserve("s", 10.0, day, DAY_MS, 0.0, 4.0, "r4", now=1.0) == 12.0  # 12 >= 10: refused
    assert tables.reserved("s", now=1.0) == 12.0
    tables.write([rec("s", cost=1.0)], {("s", 0): 1.0}, {}, now=1.0, released=["r1"])
    assert tables.reserved("s", now=1.0) == 8.0
    assert tables.reserve("s", 10.0, day, DAY_MS, 0.0, 1.0, "r5", now=1.0) is None  # 1 spent + 8 reserved < 10
    tables.release(["r2", "r3", "r5"])
    assert tables.reserved("s", now=1.0) == 0.0
    assert tables.reserve("s", 10.0, day, DAY_MS, 9.0, 1.0, "r6", now=1.0) == 10.0  # pending counts too
    # a reservation expires (a process killed mid-call)
    assert tables.reserve("t", 1.0, day, DAY_MS, 0.0, 5.0, "x", now=1.0) is None
    assert tables.reserve("t", 1.0, day, DAY_MS, 0.0, 5.0, "y", now=2.0) == 5.0
    assert tables.reserved("t", now=1.0 + RESERVATION_SECONDS + 1) == 0.0


def test_reservations_hold_a_budget_under_concurrent_admissions(make_store):
    """A bounded stress loop: 4 threads x 25 admissions of cost 1 against a budget of 10 on
    two stores opened on one location (two processes' worth): exactly 10 are let through."""
    first, second = make_store(), make_store()
    let_through: list[str] = []
    lock = threading.Lock()

    def admit(tables: UsageTables, worker: int) -> None:
        for n in range(25):
            reservation = f"w{worker}-{n}"
            if tables.reserve("team", 10.0, 0, DAY_MS, 0.0, 1.0, reservation, now=5.0) is None:
                with lock:
                    let_through.append(reservation)

    threads = [threading.Thread(target=admit, args=(store.usage(), i))
               for i, store in enumerate((first, second, first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
    assert len(let_through) == 10
    assert first.usage().reserved("team", now=5.0) == 10.0
