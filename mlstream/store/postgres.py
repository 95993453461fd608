"""The PostgreSQL store: many mlstream processes and hosts on one database.

Same records and settings as ``SQLiteStore``, in ``mlstream_*`` tables. What
SQLite gives for free is made explicit here:

* **Writers take turns.** Every transaction starts with a transaction-level advisory
  lock, so checks made inside one ("no model uses this connector") hold until it
  commits, across every instance, as SQLite's single writer guarantees.
* **Changes reach every instance.** A statement trigger on each table sends a
  NOTIFY; one listener thread per process bumps the in-memory change counter the
  caches (keys, models, cluster settings) compare on each request. No request
  queries the database to learn that nothing changed.
* **Schema migrations** are numbered and applied at start under an advisory lock,
  so instances started together neither race nor apply one twice.
* **Losing the database** is a 503 (``StoreUnavailable``) for whatever needs it,
  and for every authenticated request while the listener is cut off (a revoked key
  must not keep working because its revocation could not be heard). The pool and
  the listener reconnect by themselves.

Credentials arrive sealed (``mlstream.access.credentials``), as for SQLite.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from ..errors import StoreError, StoreUnavailable
from ..speedups import dumps_json
from .sqlite import KINDS, RESPONSE_PURGE_SECONDS, Paced, Record, Store, record_from_row
from ..usage.tables import PostgresUsage, UsageTables
from .cache_table import POSTGRES_SCHEMA as CACHE_SCHEMA, POSTGRES_SEMANTIC, CacheTable, PostgresCache
from .memory_table import POSTGRES_SCHEMA as MEMORY_SCHEMA, MemoryTable, PostgresMemory

log = logging.getLogger(__name__)

CHANNEL = "mlstream_changes"
# Advisory lock keys (any bigint unique to mlstream): "mlst" then a purpose.
MIGRATION_LOCK = 0x6D6C7374_0001
WRITE_LOCK = 0x6D6C7374_0002
# Seconds to connect, and to wait for a pooled connection, before answering 503.
CONNECT_TIMEOUT = 2
POOL_TIMEOUT = 2.0
POOL_SIZE = 8
# The listener's liveness check: a cut connection is noticed within about this long.
LISTEN_CHECK_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 2.0
# Detect a peer that vanished without closing (no FIN) on idle pooled connections.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 2}


def _table(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}")
    return f"mlstream_{kind}"


_NOTIFY_FUNCTION = f"""
CREATE FUNCTION mlstream_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', TG_TABLE_NAME);
    RETURN NULL;
END $$"""


def _records_table(kind: str) -> list[str]:
    table = _table(kind)
    return [(f"CREATE TABLE {table} (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
             " doc TEXT NOT NULL, secret TEXT)"),
            (f"CREATE TRIGGER {table}_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}"
             " FOR EACH STATEMENT EXECUTE FUNCTION mlstream_notify_change()")]


# The record kinds migration 1 created (KINDS has grown since: later kinds come with
# their own migration).
_V1_KINDS = ("connector", "model", "task", "apikey", "meta", "model_group")
# The usage tables as migration 3 created them (usage.tables' schema then, the window's
# times in a column "t"); later changes are later migrations. usage.tables.POSTGRES_SCHEMA
# is where they lead (a test checks that a database migrated from nothing has its shape).
_V3_USAGE_TABLES = (
    ("CREATE TABLE IF NOT EXISTS mlstream_usage_record (seq BIGSERIAL PRIMARY KEY, time_ms BIGINT NOT NULL,"
     " key_id TEXT NOT NULL, key_name TEXT NOT NULL, model_id TEXT NOT NULL, interface TEXT NOT NULL,"
     " route TEXT NOT NULL, status INTEGER NOT NULL, outcome TEXT NOT NULL, input_tokens BIGINT NOT NULL,"
     " output_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL, estimated BOOLEAN NOT NULL,"
     " first_token_ms DOUBLE PRECISION, duration_ms DOUBLE PRECISION NOT NULL, cost DOUBLE PRECISION,"
     " request_id TEXT NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS mlstream_usage_record_time ON mlstream_usage_record (time_ms)",
    "CREATE INDEX IF NOT EXISTS mlstream_usage_record_key ON mlstream_usage_record (key_id, time_ms)",
    ("CREATE TABLE IF NOT EXISTS mlstream_usage_spend (key_id TEXT NOT NULL, day_ms BIGINT NOT NULL,"
     " cost DOUBLE PRECISION NOT NULL, PRIMARY KEY (key_id, day_ms))"),
    ("CREATE TABLE IF NOT EXISTS mlstream_usage_window (key_id TEXT NOT NULL, kind TEXT NOT NULL,"
     " t DOUBLE PRECISION NOT NULL, amount DOUBLE PRECISION NOT NULL)"),
    "CREATE INDEX IF NOT EXISTS mlstream_usage_window_key ON mlstream_usage_window (key_id, kind, t)",
    "CREATE INDEX IF NOT EXISTS mlstream_usage_window_time ON mlstream_usage_window (t)",
)
# Numbered schema steps; a database records the ones applied. Append, never edit.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, (_NOTIFY_FUNCTION,
         *(sql for kind in _V1_KINDS for sql in _records_table(kind)),
         "CREATE TABLE mlstream_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
         ("CREATE TRIGGER mlstream_settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE"
          " ON mlstream_settings FOR EACH STATEMENT EXECUTE FUNCTION mlstream_notify_change()"))),
    # Rate-limit buckets: no trigger (a token taken is no change to announce), and
    # UNLOGGED (no WAL per predict; a crash of the database only refills the buckets).
    (2, (("CREATE UNLOGGED TABLE mlstream_rate_bucket (key TEXT PRIMARY KEY,"
          " tokens DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL, taken BOOLEAN NOT NULL)"),)),
    # Usage records, spend per key and day, the rpm/tpm windows (usage_store): no trigger,
    # a recorded call is no change for the caches. And ml-commons' model controllers.
    (3, (*_V3_USAGE_TABLES, *_records_table("controller"))),
    # Stored responses of the Responses front: no trigger (nothing cached to reload).
    (4, ("CREATE TABLE mlstream_response (id TEXT PRIMARY KEY, doc TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)",
         "CREATE INDEX mlstream_response_expires ON mlstream_response (expires)")),
    # The stop-word indices of guardrails (stopwords): records, announced like the others.
    (5, (*_records_table("stopword_index"), *_records_table("stopword_doc"))),
    # The usage window's "t" renamed (usage.tables.RENAMED): a column named like a table
    # alias stopped ``SELECT row_to_json(t) FROM mlstream_usage_window t`` (its indices follow).
    (6, ("ALTER TABLE mlstream_usage_window RENAME COLUMN t TO time_s",)),
    # Tenants (access.tenants), each usage record's tenant, and the budget reservations of
    # calls in flight (usage.tables.reserve): no trigger, a reservation is no cached state.
    (7, (*_records_table("tenant"),
         "ALTER TABLE mlstream_usage_record ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'",
         ("CREATE TABLE mlstream_usage_reserve (id TEXT PRIMARY KEY, scope_id TEXT NOT NULL,"
          " amount DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL)"),
         "CREATE INDEX mlstream_usage_reserve_scope ON mlstream_usage_reserve (scope_id, expires)")),
    # The response cache (store.cache_table), shared by every host: no trigger (an entry is
    # no cached state to reload). Usage records of cache hits: the hit and what it saved.
    (8, (*CACHE_SCHEMA,
         "ALTER TABLE mlstream_usage_record ADD COLUMN cache_hit BOOLEAN NOT NULL DEFAULT false",
         "ALTER TABLE mlstream_usage_record ADD COLUMN saved_input_tokens BIGINT NOT NULL DEFAULT 0",
         "ALTER TABLE mlstream_usage_record ADD COLUMN saved_output_tokens BIGINT NOT NULL DEFAULT 0",
         "ALTER TABLE mlstream_usage_record ADD COLUMN saved_cost DOUBLE PRECISION")),
    # Semantic matching of the response cache: an entry's group and its conversation's vector.
    (9, tuple(sql for _, sql in POSTGRES_SEMANTIC)),
    # Conversation memory (store.memory_table): no trigger, a message is no cached state.
    (10, tuple(MEMORY_SCHEMA)),
    # Agents (agents.agents) and the MCP server's tools (agents.mcp_server): records,
    # announced like the others.
    (11, (*_records_table("agent"), *_records_table("mcp_tool"))),
)

# One statement, atomic under the row's lock: refill for the time since the last take (the
# database's clock, the same for every instance), take a token if there is one.
_REFILLED = "LEAST(%(capacity)s, b.tokens + GREATEST(excluded.updated - b.updated, 0) * %(rate)s)"
_TAKE_TOKEN = (
    "INSERT INTO mlstream_rate_bucket AS b (key, tokens, updated, taken)"
    " VALUES (%(key)s, %(capacity)s - 1, EXTRACT(EPOCH FROM clock_timestamp()), true)"
    f" ON CONFLICT (key) DO UPDATE SET tokens = {_REFILLED} - CASE WHEN {_REFILLED} >= 1 THEN 1 ELSE 0 END,"
    f" taken = {_REFILLED} >= 1, updated = excluded.updated"
    " RETURNING taken, tokens")


class PostgresStore(Store):
    def __init__(self, url: str) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise StoreError("a postgresql:// store needs psycopg 3 and psycopg_pool: "
                             "pip install 'mlstream[postgres]'") from None
        self._psycopg = psycopg
        self._url = url
        self._local = threading.local()  # .conn: the connection of this thread's open transaction
        # Guards the change counter: one increment or read under it.
        self._counter_lock = threading.Lock()
        self._counter = 0
        self.response_purge = Paced(RESPONSE_PURGE_SECONDS)
        self._cache_table = PostgresCache(self.session)  # one, so its purge is paced per process
        self._memory_table = PostgresMemory(self.session)
        # Backends of our own pooled connections (guarded by _counter_lock): their commits
        # bump the counter at once, so their NOTIFYs are not counted twice.
        self._own_backends: set[int] = set()
        self._listening = threading.Event()
        self._closing = threading.Event()
        # A channel of this store's own: close() NOTIFYs it to end the listener's wait at once.
        self._wake_channel = f"mlstream_wake_{uuid.uuid4().hex}"
        self._pool = ConnectionPool(url, min_size=1, max_size=POOL_SIZE, timeout=POOL_TIMEOUT, open=False,
                                    name="mlstream-store", check=ConnectionPool.check_connection,
                                    kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT,
                                            **_KEEPALIVES})
        try:
            with self._errors("open the PostgreSQL store"):
                self._pool.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
                self._migrate()
        except BaseException:
            self._pool.close()
            raise
        self._listener = threading.Thread(target=self._listen, name="mlstream-store-listener", daemon=True)
        self._listener.start()
        # Changes made before the first LISTEN are read by the callers' first loads anyway;
        # waiting here only means a store that answers change_counter() at once.
        if not self._listening.wait(CONNECT_TIMEOUT * 2):
            self.close()
            raise StoreUnavailable("the PostgreSQL store accepted connections but not LISTEN")

    # --- Store -----------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "conn", None) is not None:
            yield  # joins the outer transaction
            return
        with self._errors("write to the PostgreSQL store"), self._pool.connection() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                self._local.conn = conn
                try:
                    yield
                finally:
                    self._local.conn = None
            # Committed: this process's caches see their own writes on the next request,
            # not when the NOTIFY comes round.
            with self._counter_lock:
                self._own_backends.add(conn.info.backend_pid)
                self._counter += 1

    def get(self, kind: str, record_id: str) -> Record | None:
        rows = self._query(f"SELECT id, doc, secret FROM {_table(kind)} WHERE id = %s", (record_id,))
        return record_from_row(rows[0]) if rows else None

    def scan(self, kind: str) -> list[Record]:
        return [record_from_row(row) for row in self._query(f"SELECT id, doc, secret FROM {_table(kind)} ORDER BY seq")]

    def put(self, kind: str, record: Record) -> None:
        with self.transaction():
            self._query(f"INSERT INTO {_table(kind)} (id, doc, secret) VALUES (%s, %s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET doc = excluded.doc, secret = excluded.secret",
                        (record.id, json.dumps(record.doc), record.secret), fetch=False)

    def delete(self, kind: str, record_id: str) -> bool:
        with self.transaction():
            return bool(self._query(f"DELETE FROM {_table(kind)} WHERE id = %s RETURNING id", (record_id,)))

    def get_settings(self) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in self._query("SELECT key, value FROM mlstream_settings")}

    def put_settings(self, values: dict[str, Any]) -> None:
        with self.transaction():
            for key, value in values.items():
                if value is None:
                    self._query("DELETE FROM mlstream_settings WHERE key = %s", (key,), fetch=False)
                else:
                    self._query("INSERT INTO mlstream_settings (key, value) VALUES (%s, %s) "
                                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                                (key, json.dumps(value)), fetch=False)

    def take_token(self, key: str, capacity: float, per_second: float) -> float:
        rows = self._query(_TAKE_TOKEN, {"key": key, "capacity": capacity, "rate": per_second})
        taken, tokens = rows[0]
        return 0.0 if taken else (1.0 - tokens) / per_second

    def usage(self) -> UsageTables:
        return PostgresUsage(self.session)

    def cache(self) -> CacheTable:
        return self._cache_table

    def memory(self) -> MemoryTable:
        return self._memory_table


    @contextmanager
    def session(self) -> Iterator[Any]:
        """A pooled connection inside a transaction of its own, errors mapped (503 when the
        database is unreachable): for the usage tables, which take no write lock and
        send no NOTIFY."""
        with self._errors("use the PostgreSQL store's usage tables"), self._pool.connection() as conn:
            with conn.transaction():
                yield conn

    def put_responses(self, responses: Sequence[tuple[str, dict[str, Any], float]]) -> None:
        rows = [(response_id, dumps_json(doc).decode(), expires_at) for response_id, doc, expires_at in responses]
        purge = self.response_purge.due()
        with self._errors("keep responses in the PostgreSQL store"), self._pool.connection() as conn:
            with conn.transaction():
                if purge:
                    conn.execute("DELETE FROM mlstream_response WHERE expires <= EXTRACT(EPOCH FROM clock_timestamp())")
                conn.cursor().executemany(
                    "INSERT INTO mlstream_response (id, doc, expires) VALUES (%s, %s, %s) ON CONFLICT (id)"
                    " DO UPDATE SET doc = excluded.doc, expires = excluded.expires", rows)

    def get_response(self, response_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT doc FROM mlstream_response WHERE id = %s"
                           " AND expires > EXTRACT(EPOCH FROM clock_timestamp())", (response_id,))
        return json.loads(rows[0][0]) if rows else None

    def delete_response(self, response_id: str) -> bool:
        return bool(self._query("DELETE FROM mlstream_response WHERE id = %s"
                                " AND expires > EXTRACT(EPOCH FROM clock_timestamp()) RETURNING id", (response_id,)))

    def change_counter(self) -> int:
        """Bumped by the listener on each NOTIFY; while it is cut off nothing can be
        trusted to be current, so this raises StoreUnavailable (503, /readyz fails)."""
        if not self._listening.is_set():
            raise StoreUnavailable("the PostgreSQL store is unreachable; retrying in the background")
        with self._counter_lock:
            return self._counter

    def close(self) -> None:
        self._closing.set()
        if self._listener.is_alive():
            self._wake_listener()
            self._listener.join(LISTEN_CHECK_SECONDS + CONNECT_TIMEOUT + 1)
        self._pool.close()

    def _wake_listener(self) -> None:
        """End the listener's wait for notifications now rather than at its next liveness
        check. Only while it listens: cut off, it waits on ``_closing`` (set) or connects."""
        from psycopg_pool import PoolTimeout

        if not self._listening.is_set():
            return
        try:
            with self._pool.connection(timeout=LISTEN_CHECK_SECONDS) as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self._wake_channel,))
        except (self._psycopg.Error, PoolTimeout):
            pass  # the database just went away: the listener's next check sees that

    # --- helpers ---------------------------------------------------------------

    def _query(self, sql: str, params: tuple | dict = (), *, fetch: bool = True) -> list[tuple]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:  # inside this thread's transaction: its own writes, its lock
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if fetch else []
        with self._errors("read the PostgreSQL store"), self._pool.connection() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if fetch else []

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """psycopg's errors as ours: unreachable → 503, anything else → 500."""
        from psycopg_pool import PoolTimeout

        try:
            yield
        except (self._psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(f"cannot {doing}: the database is unreachable "
                                   f"({_first_line(exc)})") from None
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot {doing}: {_first_line(exc)}") from None

    def _migrate(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS mlstream_schema_migrations ("
                         " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            applied = {row[0] for row in conn.execute("SELECT version FROM mlstream_schema_migrations")}
            known = {version for version, _ in MIGRATIONS}
            if applied - known:
                raise StoreError(f"the database's schema is at version {max(applied)}, newer than this "
                                 f"mlstream knows ({max(known)}): upgrade mlstream")
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                for sql in statements:
                    conn.execute(sql)
                conn.execute("INSERT INTO mlstream_schema_migrations (version) VALUES (%s)", (version,))
                log.info("applied schema migration %d to the PostgreSQL store", version)

    def _bump(self, backend_pid: int | None = None) -> None:
        with self._counter_lock:
            if backend_pid not in self._own_backends:
                self._counter += 1

    def _listen(self) -> None:
        """LISTEN for changes, forever: reconnect with backoff when the connection is lost."""
        delay, lost = 0.1, False
        while not self._closing.is_set():
            try:
                with self._psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                           **_KEEPALIVES) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    conn.execute(f"LISTEN {self._wake_channel}")
                    self._bump()  # whatever changed while nobody listened is reloaded
                    if lost:
                        log.info("the PostgreSQL store is reachable again")
                    self._listening.set()
                    delay, lost = 0.1, False
                    while not self._closing.is_set():
                        for notice in conn.notifies(timeout=LISTEN_CHECK_SECONDS):
                            if notice.channel == self._wake_channel:
                                break  # close() is waiting
                            self._bump(notice.pid)
                        conn.execute("SELECT 1")  # a dead connection raises here
            except self._psycopg.Error as exc:
                if self._listening.is_set():
                    log.warning("lost the PostgreSQL store (%s); requests needing it get 503 until it "
                                "is back", _first_line(exc))
                self._listening.clear()
                lost = True
            self._closing.wait(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

