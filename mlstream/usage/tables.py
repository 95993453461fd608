"""The usage tables, in whichever store the deployment runs on.

    usage_record   one row per provider call (``usage.UsageRecord``), kept for queries
    usage_spend    spend per key and UTC day, added to as records are written: a budget
                   check reads at most 31 rows instead of summing a month of records
    usage_window   recent events per key for the sliding 60 s limits: one row per request
                   admitted (kind "r", for ``rpm``) and per call's tokens (kind "t", ``tpm``),
                   at ``time_s`` (Unix seconds; the column was ``t`` before: see ``RENAMED``)
    usage_reserve  budget reservations of calls in flight (``reserve``), each released in
                   the transaction that writes its call's record, or at its expiry

"Per key" above means per scope: a key's id, or a tenant's (``records.tenant_scope``),
since a call is charged to both.

SQLite keeps them in a file of their own (``usage.db`` beside ``mlstream.db``): writing
a record must not move the main store's change counter, which would empty every
cache on every call, nor wait for its write lock. PostgreSQL keeps them in
``mlstream_usage_*`` tables without a NOTIFY trigger, for the same reason.

Both run the same SQL (``?`` placeholders, turned into ``%s`` for psycopg); what
differs is how a transaction is had, and how one key's ``rpm`` check is made atomic
across processes: SQLite's ``BEGIN IMMEDIATE`` serialises every writer of the file,
PostgreSQL takes a transaction-level advisory lock on the key.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..errors import StoreError
from .records import UsageQuery, UsageRecord, UsageSums

WINDOW_SECONDS = 60.0  # rpm and tpm are sliding windows of this length
_GROUP_SQL = {"key": "key_name", "tenant": "tenant", "model": "model_id", "interface": "interface", "outcome": "outcome",
              "day": "(time_ms / 86400000) * 86400000", "hour": "(time_ms / 3600000) * 3600000"}
_RECORD_COLUMNS = ("time_ms", "key_id", "key_name", "model_id", "interface", "route", "status", "outcome",
                   "input_tokens", "output_tokens", "cached_input_tokens", "estimated", "first_token_ms",
                   "duration_ms", "cost", "request_id", "tenant", "cache_hit", "saved_input_tokens",
                   "saved_output_tokens", "saved_cost")
_SUMS = ("COUNT(*), SUM(CASE WHEN outcome = 'error' THEN 1 ELSE 0 END), SUM(input_tokens), "
         "SUM(output_tokens), SUM(cached_input_tokens), SUM(cost), "
         "SUM(CASE WHEN cache_hit THEN 1 ELSE 0 END), SUM(saved_cost)")

Execute = Callable[[str, Sequence[Any]], list[tuple]]


def schema(prefix: str, *, serial: str, big: str, real: str, boolean: str) -> list[str]:
    """The tables' DDL for one backend's types (``prefix`` is PostgreSQL's ``mlstream_``)."""
    return [
        (f"CREATE TABLE IF NOT EXISTS {prefix}usage_record (seq {serial}, time_ms {big} NOT NULL,"
         " key_id TEXT NOT NULL, key_name TEXT NOT NULL, model_id TEXT NOT NULL, interface TEXT NOT NULL,"
         " route TEXT NOT NULL, status INTEGER NOT NULL, outcome TEXT NOT NULL,"
         f" input_tokens {big} NOT NULL, output_tokens {big} NOT NULL, cached_input_tokens {big} NOT NULL,"
         f" estimated {boolean} NOT NULL, first_token_ms {real}, duration_ms {real} NOT NULL, cost {real},"
         " request_id TEXT NOT NULL, tenant TEXT NOT NULL DEFAULT 'default',"
         f" cache_hit {boolean} NOT NULL DEFAULT {'false' if boolean == 'BOOLEAN' else '0'},"
         f" saved_input_tokens {big} NOT NULL DEFAULT 0, saved_output_tokens {big} NOT NULL DEFAULT 0,"
         f" saved_cost {real})"),
        f"CREATE INDEX IF NOT EXISTS {prefix}usage_record_time ON {prefix}usage_record (time_ms)",
        f"CREATE INDEX IF NOT EXISTS {prefix}usage_record_key ON {prefix}usage_record (key_id, time_ms)",
        (f"CREATE TABLE IF NOT EXISTS {prefix}usage_spend (key_id TEXT NOT NULL, day_ms {big} NOT NULL,"
         f" cost {real} NOT NULL, PRIMARY KEY (key_id, day_ms))"),
        (f"CREATE TABLE IF NOT EXISTS {prefix}usage_window (key_id TEXT NOT NULL, kind TEXT NOT NULL,"
         f" time_s {real} NOT NULL, amount {real} NOT NULL)"),
        f"CREATE INDEX IF NOT EXISTS {prefix}usage_window_key ON {prefix}usage_window (key_id, kind, time_s)",
        f"CREATE INDEX IF NOT EXISTS {prefix}usage_window_time ON {prefix}usage_window (time_s)",
        (f"CREATE TABLE IF NOT EXISTS {prefix}usage_reserve (id TEXT PRIMARY KEY, scope_id TEXT NOT NULL,"
         f" amount {real} NOT NULL, expires {real} NOT NULL)"),
        f"CREATE INDEX IF NOT EXISTS {prefix}usage_reserve_scope ON {prefix}usage_reserve (scope_id, expires)",
    ]


# Columns renamed since a release wrote them: (table without prefix, old name, new name).
# The window's "t" read as the whole row in PostgreSQL's ``SELECT row_to_json(t) FROM
# mlstream_usage_window t`` (an unqualified name is a column before it is a table alias):
# every relation must read as rows. PostgreSQL renames it in a migration (store.postgres),
# SQLite when usage.db is opened (``SQLiteUsage``).
RENAMED = (("usage_window", "t", "time_s"),)
# Columns added since a release wrote the tables: (table, column, its SQL type and default).
ADDED = (("usage_record", "tenant", "TEXT NOT NULL DEFAULT 'default'"),
         ("usage_record", "cache_hit", "INTEGER NOT NULL DEFAULT 0"),
         ("usage_record", "saved_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
         ("usage_record", "saved_output_tokens", "INTEGER NOT NULL DEFAULT 0"),
         ("usage_record", "saved_cost", "REAL"))
# A reservation outlives a call that never records (a process killed mid-call) by this much.
RESERVATION_SECONDS = 900.0


POSTGRES_SCHEMA = schema("mlstream_", serial="BIGSERIAL PRIMARY KEY", big="BIGINT", real="DOUBLE PRECISION",
                         boolean="BOOLEAN")
SQLITE_SCHEMA = schema("", serial="INTEGER PRIMARY KEY AUTOINCREMENT", big="INTEGER", real="REAL",
                       boolean="INTEGER")


class UsageTables(ABC):
    """The usage tables of one store. Every method is one short transaction or read."""

    _prefix = ""

    # --- what a backend provides ---------------------------------------------------

    @abstractmethod
    def _transaction(self, lock_key: str | None = None) -> Any:
        """A context manager giving an ``Execute`` inside one transaction; with
        ``lock_key``, no other transaction holding that key runs at the same time,
        in any process on this store."""

    @abstractmethod
    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple]: ...

    @abstractmethod
    def close(self) -> None: ...

    # --- writes ----------------------------------------------------------------------

    def write(self, records: Sequence[UsageRecord], spend: Mapping[tuple[str, int], float],
              tokens: Mapping[str, int], now: float | None = None, released: Sequence[str] = ()) -> None:
        """One batch: the records, the spend per (scope id, UTC day in ms), the tokens per
        scope id to count in its ``tpm`` window, and the reservations the records settle,
        all or nothing."""
        now = time.time() if now is None else now
        p = self._prefix
        with self._transaction() as execute:
            for reservation in released:
                execute(f"DELETE FROM {p}usage_reserve WHERE id = ?", [reservation])
            if records:
                placeholders = ", ".join("?" * len(_RECORD_COLUMNS))
                sql = f"INSERT INTO {p}usage_record ({', '.join(_RECORD_COLUMNS)}) VALUES ({placeholders})"
                for record in records:
                    execute(sql, [getattr(record, column) for column in _RECORD_COLUMNS])
            for (key_id, day_ms), cost in spend.items():
                execute(f"INSERT INTO {p}usage_spend (key_id, day_ms, cost) VALUES (?, ?, ?) ON CONFLICT"
                        f" (key_id, day_ms) DO UPDATE SET cost = {p}usage_spend.cost + excluded.cost",
                        [key_id, day_ms, cost])
            for key_id, count in tokens.items():
                execute(f"INSERT INTO {p}usage_window (key_id, kind, time_s, amount) VALUES (?, 't', ?, ?)",
                        [key_id, now, count])
            execute(f"DELETE FROM {p}usage_window WHERE time_s < ?", [now - WINDOW_SECONDS])

    def take_request(self, key_id: str, rpm: int, now: float | None = None) -> float:
        """Count one request in ``key_id``'s 60 s window if fewer than ``rpm`` are there:
        0.0 when counted, else the seconds until the oldest leaves the window. Exact
        under concurrency, across every process on the store."""
        return self.take(key_id, rpm, now)[0]

    def take(self, key_id: str, rpm: int, now: float | None = None) -> tuple[float, int]:
        """``take_request``, and how many requests the window holds after it."""
        p = self._prefix
        with self._transaction(lock_key=key_id) as execute:
            now = time.time() if now is None else now
            start = now - WINDOW_SECONDS
            execute(f"DELETE FROM {p}usage_window WHERE key_id = ? AND kind = 'r' AND time_s <= ?",
                    [key_id, start])
            count, oldest = execute(f"SELECT COUNT(*), MIN(time_s) FROM {p}usage_window WHERE key_id = ?"
                                    " AND kind = 'r'", [key_id])[0]
            if int(count) >= rpm:
                return max(float(oldest) - start, 0.001), int(count)
            execute(f"INSERT INTO {p}usage_window (key_id, kind, time_s, amount) VALUES (?, 'r', ?, 1)",
                    [key_id, now])
            return 0.0, int(count) + 1

    def reserve(self, scope_id: str, budget: float, from_ms: int, to_ms: int, pending: float, amount: float,
                reservation_id: str, now: float | None = None) -> float | None:
        """Reserve ``amount`` of ``scope_id``'s budget for a call about to be made, unless its
        spend in [from_ms, to_ms) (committed, plus ``pending``: this process's charges not yet
        committed) and the reservations of calls in flight already reach ``budget``: then
        nothing is reserved and that total is returned. None: reserved (or nothing to reserve).
        One transaction serialised per scope in the store, so exact across processes and hosts."""
        p = self._prefix
        now = time.time() if now is None else now
        with self._transaction(lock_key=scope_id) as execute:
            committed = execute(f"SELECT SUM(cost) FROM {p}usage_spend WHERE key_id = ? AND day_ms >= ?"
                                " AND day_ms < ?", [scope_id, from_ms, to_ms])[0][0]
            reserved = execute(f"SELECT SUM(amount) FROM {p}usage_reserve WHERE scope_id = ? AND expires > ?",
                               [scope_id, now])[0][0]
            total = float(committed or 0.0) + pending + float(reserved or 0.0)
            if total >= budget:
                return total
            if amount > 0:
                execute(f"DELETE FROM {p}usage_reserve WHERE scope_id = ? AND expires <= ?", [scope_id, now])
                execute(f"INSERT INTO {p}usage_reserve (id, scope_id, amount, expires) VALUES (?, ?, ?, ?)",
                        [reservation_id, scope_id, amount, now + RESERVATION_SECONDS])
            return None

    def release(self, reservation_ids: Sequence[str]) -> None:
        """Drop reservations whose calls will write no record (one refused by a later scope)."""
        if reservation_ids:
            with self._transaction() as execute:
                for reservation in reservation_ids:
                    execute(f"DELETE FROM {self._prefix}usage_reserve WHERE id = ?", [reservation])

    def reserved(self, scope_id: str, now: float | None = None) -> float:
        """The reservations of ``scope_id``'s calls in flight."""
        now = time.time() if now is None else now
        rows = self._read(f"SELECT SUM(amount) FROM {self._prefix}usage_reserve WHERE scope_id = ? AND expires > ?",
                          [scope_id, now])
        return float(rows[0][0] or 0.0) if rows else 0.0

    # --- reads -----------------------------------------------------------------------

    def spent(self, key_id: str, from_ms: int, to_ms: int) -> float:
        """What ``key_id`` spent in [from_ms, to_ms), both on UTC day boundaries."""
        rows = self._read(f"SELECT SUM(cost) FROM {self._prefix}usage_spend WHERE key_id = ? AND day_ms >= ?"
                          " AND day_ms < ?", [key_id, from_ms, to_ms])
        return float(rows[0][0] or 0.0) if rows else 0.0

    def window_tokens(self, key_id: str, now: float | None = None) -> tuple[int, float | None]:
        """(tokens ``key_id`` used in the last 60 s, when the oldest of them leaves the window)."""
        now = time.time() if now is None else now
        rows = self._read(f"SELECT SUM(amount), MIN(time_s) FROM {self._prefix}usage_window WHERE key_id = ?"
                          " AND kind = 't' AND time_s > ?", [key_id, now - WINDOW_SECONDS])
        total, oldest = rows[0] if rows else (None, None)
        return int(total or 0), None if oldest is None else float(oldest) + WINDOW_SECONDS

    def summarize(self, query: UsageQuery) -> tuple[list[tuple[dict[str, Any], UsageSums]], UsageSums]:
        """(rows grouped as ``query.group_by`` asks, ordered by their group fields; totals)."""
        where, params = _where(query)
        table = f"{self._prefix}usage_record"
        totals = _sums(self._read(f"SELECT {_SUMS} FROM {table} WHERE {where}", params)[0])
        if not query.group_by:
            return ([({}, totals)] if totals.requests else []), totals
        groups = [_GROUP_SQL[field] for field in query.group_by]
        positions = ", ".join(str(i + 1) for i in range(len(groups)))
        rows = self._read(f"SELECT {', '.join(groups)}, {_SUMS} FROM {table} WHERE {where}"
                          f" GROUP BY {positions} ORDER BY {positions}", params)
        out = []
        for row in rows:
            n = len(groups)
            out.append((dict(zip(query.group_by, row[:n])), _sums(row[n:])))
        return out, totals

    def records(self, query: UsageQuery) -> list[UsageRecord]:
        """Single records, newest first, at most ``query.size``."""
        where, params = _where(query)
        rows = self._read(f"SELECT {', '.join(_RECORD_COLUMNS)} FROM {self._prefix}usage_record WHERE {where}"
                          " ORDER BY time_ms DESC, seq DESC LIMIT ?", [*params, query.size])
        return [_record(row) for row in rows]


def _where(query: UsageQuery) -> tuple[str, list[Any]]:
    clauses, params = ["time_ms >= ?", "time_ms < ?"], [query.from_ms, query.to_ms]
    for column, value in (("key_name", query.key_name), ("key_id", query.key_id), ("model_id", query.model_id),
                          ("tenant", query.tenant)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    return " AND ".join(clauses), params


def _sums(row: Sequence[Any]) -> UsageSums:
    requests, errors, inp, out, cached, cost, hits, saved = row
    return UsageSums(int(requests or 0), int(errors or 0), int(inp or 0), int(out or 0), int(cached or 0),
                     None if cost is None else float(cost), int(hits or 0), None if saved is None else float(saved))


def _record(row: Sequence[Any]) -> UsageRecord:
    values = dict(zip(_RECORD_COLUMNS, row))
    values["estimated"], values["cache_hit"] = bool(values["estimated"]), bool(values["cache_hit"])
    for name in ("time_ms", "status", "input_tokens", "output_tokens", "cached_input_tokens", "saved_input_tokens",
                 "saved_output_tokens"):
        values[name] = int(values[name])
    for name in ("first_token_ms", "cost", "saved_cost"):
        if values[name] is not None:
            values[name] = float(values[name])
    values["duration_ms"] = float(values["duration_ms"])
    return UsageRecord(**values)


class SQLiteUsage(UsageTables):
    """``usage.db``: a write connection (batches and rpm checks, one at a time under a
    lock; ``BEGIN IMMEDIATE`` serialises them with other processes) and a read
    connection (WAL: reads never wait for a writer)."""

    FILENAME = "usage.db"

    def __init__(self, data_dir: Path, busy_timeout: float) -> None:
        path = data_dir / self.FILENAME
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout)
            if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._db.execute("PRAGMA journal_mode=WAL")  # once: asking again writes the header
            self._db.execute("PRAGMA synchronous=NORMAL")  # a committed batch survives a process crash
            _bring_up_to_date(self._db)
            for sql in SQLITE_SCHEMA:
                self._db.execute(sql)
            self._read_db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                            timeout=busy_timeout)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the usage tables at {path}: {exc}") from exc
        # Guards the write connection: one short transaction under it (disk I/O, a wait
        # for another process's write lock); never taken by a request that has no rpm.
        self._lock = threading.Lock()
        # Guards the read connection: one indexed read under it.
        self._read_lock = threading.Lock()

    @contextmanager
    def _transaction(self, lock_key: str | None = None) -> Iterator[Execute]:
        def execute(sql: str, params: Sequence[Any]) -> list[tuple]:
            return self._db.execute(sql, tuple(params)).fetchall()

        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield execute
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"usage tables: {exc}") from exc

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        with self._read_lock:
            try:
                return self._read_db.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"usage tables: {exc}") from exc

    def close(self) -> None:
        with self._read_lock:
            self._read_db.close()
        with self._lock:
            self._db.close()


def _bring_up_to_date(db: sqlite3.Connection) -> None:
    """A usage.db of an older release brought to ``SQLITE_SCHEMA``: each column of ``RENAMED``
    that its table still has is renamed (the indices follow the column), each of ``ADDED`` it
    lacks is added, in one transaction. The store opens the file under its set-up lock: one
    process at a time does this."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for table, old, new in RENAMED:
            if old in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                db.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
        for table, column, kind in ADDED:
            columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if columns and column not in columns:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class PostgresUsage(UsageTables):
    """The ``mlstream_usage_*`` tables (created by the store's migration 3, the window's
    column renamed by migration 6), through the store's connection pool: ``session``
    gives a pooled connection in a transaction of its own, without the store's write lock."""

    _prefix = "mlstream_"

    def __init__(self, session: Callable[[], Any]) -> None:
        self._session = session

    @contextmanager
    def _transaction(self, lock_key: str | None = None) -> Iterator[Execute]:
        with self._session() as conn:
            def execute(sql: str, params: Sequence[Any]) -> list[tuple]:
                cursor = conn.execute(sql.replace("?", "%s"), tuple(params))
                return cursor.fetchall() if cursor.description else []

            if lock_key is not None:
                # "mlsu" then the key's hash: one rpm check per key at a time, deployment-wide.
                execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 7813))", [lock_key])
            yield execute

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        with self._transaction() as execute:
            return execute(sql, params)

    def close(self) -> None:
        pass  # the store's pool is closed by the store
