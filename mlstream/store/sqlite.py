"""Durable state: connectors, models, model groups, tasks and cluster settings.

``Store`` is the interface a second backend (PostgreSQL is planned) implements;
``SQLiteStore`` is the embedded default. The store holds JSON documents and an
opaque ``secret`` string per record: credentials are sealed by
``mlstream.access.credentials`` before they get here, so no backend ever sees them in
the clear.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from ..errors import StoreError
from ..usage.limits import take
from ..speedups import dumps_json
from ..usage.tables import SQLiteUsage, UsageTables
from .cache_table import CacheTable, SQLiteCache
from .memory_table import MemoryTable, SQLiteMemory
from .transactions import write_transaction

log = logging.getLogger(__name__)

# meta: the store's own bookkeeping (e.g. the master-key check value); controller: ml-commons'
# model controllers (per-user rate limits), by model id; stopword_index, stopword_doc: the
# stop-word indices of guardrails (``stopwords``); tenant: the teams keys belong to (``access.tenants``).
_Side = TypeVar("_Side")
KINDS = ("connector", "model", "task", "apikey", "meta", "model_group", "controller", "stopword_index",
         "stopword_doc", "tenant", "agent", "mcp_tool")
# How long a write waits for another process's write lock (``mlstream keys`` beside a server).
BUSY_TIMEOUT = 10.0
# Taken (flock, exclusive) by every process while it opens and migrates a data
# directory's databases: switching a new file to WAL needs an exclusive lock that
# SQLite's busy handler does not wait for when two connections both hold a shared
# one ("database is locked" at once), so two processes starting together
# (``serve --workers``) take turns here instead. Held for the set-up only.
SETUP_LOCK_FILENAME = ".mlstream-setup.lock"
# The WAL index header: two copies of 48 bytes at the start of the -shm file (SQLite's
# walformat: iVersion, iChange, mxFrame, checksums, salts...), which every commit rewrites.
WAL_INDEX_HEADER_BYTES = 96


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    doc: dict[str, Any]
    secret: str | None = None


# Expired stored responses are purged at most this often, by the keeping of a response:
# a DELETE on every one cost ~80 µs of CPU under load even when nothing had expired, and
# reads never see an expired response anyway.
RESPONSE_PURGE_SECONDS = 60.0


class Paced:
    """Says when a chore is due: at the first ask, then at most once every ``seconds``."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self._next = -math.inf
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = self._clock()
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self._seconds
            return True


class Store(ABC):
    """Records by kind and id, plus the persistent cluster settings."""

    @abstractmethod
    def get(self, kind: str, record_id: str) -> Record | None: ...

    @abstractmethod
    def scan(self, kind: str) -> list[Record]:
        """Every record of ``kind``, oldest first."""

    @abstractmethod
    def put(self, kind: str, record: Record) -> None:
        """Insert ``record`` or replace the one with its id."""

    @abstractmethod
    def delete(self, kind: str, record_id: str) -> bool:
        """Remove a record; False when there was none."""

    @abstractmethod
    def transaction(self) -> Any:
        """A context manager: everything inside commits together or not at all.

        Checks made inside (e.g. "no model uses this connector") hold until it ends.
        Nested use joins the outer transaction.
        """

    @abstractmethod
    def get_settings(self) -> dict[str, Any]: ...

    @abstractmethod
    def put_settings(self, values: dict[str, Any]) -> None:
        """Set each key; a value of None removes it (back to the default)."""

    @abstractmethod
    def change_counter(self) -> int:
        """A number that changes whenever another process has written to the store.

        Lets a server pick up API keys created by ``mlstream keys`` without polling.
        """

    @contextmanager
    def one_counter_reading(self) -> Iterator[None]:
        """Within this block the calling thread reads the change counter at most once
        (for a store where a reading costs a query): a request sees the store as it
        was when it first asked, whichever caches it goes through. A write by the
        thread makes the next reading fresh."""
        yield

    @abstractmethod
    def take_token(self, key: str, capacity: float, per_second: float) -> float:
        """Take a token from the rate-limit bucket ``key`` (created full) for every process
        on this store; 0.0 when taken, else the seconds until the next token."""

    def usage(self) -> UsageTables:
        """The usage tables (records, spend, rpm/tpm windows) on this store; opened on first
        use and closed with the store. A backend without them raises StoreError."""
        raise StoreError(f"{type(self).__name__} has no usage tables")

    def cache(self) -> CacheTable:
        """The response cache's entries on this store; opened on first use and closed with
        the store. A backend without them raises StoreError."""
        raise StoreError(f"{type(self).__name__} has no response cache")

    def memory(self) -> MemoryTable:
        """Conversation memory's tables on this store; opened on first use and closed with
        the store. A backend without them raises StoreError."""
        raise StoreError(f"{type(self).__name__} has no conversation memory")

    # Stored responses of the Responses front (``/v1/responses`` with ``store``): kept apart
    # from the records (no change to announce, no cache to reload), each until it expires.

    @abstractmethod
    def put_responses(self, responses: Sequence[tuple[str, dict[str, Any], float]]) -> None:
        """Keep each (id, doc, expires at: Unix seconds) in one transaction; expired ones
        are purged meanwhile (by a call at most every ``RESPONSE_PURGE_SECONDS``)."""

    @abstractmethod
    def get_response(self, response_id: str) -> dict[str, Any] | None:
        """The stored doc, or None when there is none or it has expired."""

    @abstractmethod
    def delete_response(self, response_id: str) -> bool:
        """Remove a stored response; False when there was none (or it had expired)."""

    @abstractmethod
    def close(self) -> None: ...


class SQLiteStore(Store):
    """SQLite in WAL mode: readers never block the writer, state survives restarts.

    One connection serialised by a lock: writes are rare (admin calls) and reads on
    the predict path are served from the caller's cache, so a connection pool would
    buy nothing but complexity. Reads outside a transaction (the change counter,
    asked on every request, among them) have a connection and a lock of their own,
    so they never wait behind a write.
    """

    FILENAME = "mlstream.db"
    # Rate-limit buckets live in a file of their own, so a predict taking a token never
    # waits for SQLite's write lock behind an admin write (or ``mlstream keys``).
    BUCKETS_FILENAME = "ratelimit.db"
    # Stored responses too: a response kept at the end of a stream never waits behind an
    # admin write, and never moves the main file's change counter (which reloads caches).
    RESPONSES_FILENAME = "responses.db"

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / self.FILENAME
        # Guards the write connection, the transaction depth and its owner. Writes run
        # under it (disk I/O, up to BUSY_TIMEOUT waiting for another process's write):
        # only admin calls and a model-cache miss take it, never a request's hot path.
        self._lock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None  # the thread inside the outermost transaction
        # Guards the buckets connection: one short read-modify-write transaction under it
        # (rate-limited predicts only), which SQLite's file lock makes atomic across processes.
        self._buckets_lock = threading.Lock()
        # Guards the responses connection: one short statement under it (a response kept,
        # read or deleted by the Responses front).
        self._responses_lock = threading.Lock()
        self.response_purge = Paced(RESPONSE_PURGE_SECONDS)
        # Guards the read connection. WAL readers never wait for a writer, so under it
        # runs one short read (a page-cache lookup, or the in-memory change counter).
        self._read_lock = threading.Lock()
        # Each thread's change counter inside one_counter_reading (active, value).
        self._pinned = threading.local()
        self._one_reading = _OneCounterReading(self._pinned)
        # The WAL index (mlstream.db-shm) read-only, for its header; None: not readable,
        # every reading of the change counter asks SQLite (see _read_counter).
        self._wal_index: int | None = None
        # (the WAL index header, the change counter read after it): swapped whole.
        self._counter_seen: tuple[bytes, int] | None = None
        # The usage tables (usage.db), opened by the first usage() call: their writes
        # must not move this file's data_version, the change counter every cache reads.
        # The usage tables, the response cache and conversation memory, each in a file of its
        # own, opened by usage(), cache() and memory(); guarded by the lock (opening runs under it).
        self._side_files: dict[type, Any] = {}
        self._usage_lock = threading.Lock()
        try:
            with _setup_lock(data_dir):
                self._open()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc

    def _open(self) -> None:
        """Open both databases, in WAL mode, and create what is missing (under the set-up lock)."""
        self._db = self._connect()
        # WAL is a property of the file: once set, every later open finds it, and
        # asking again (a write of the header) is skipped.
        _ensure_wal(self._db)
        self._db.execute("PRAGMA synchronous=NORMAL")
        for kind in KINDS:
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {kind} ("
                " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " id TEXT NOT NULL UNIQUE, doc TEXT NOT NULL, secret TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        # A second connection for reads outside a transaction. Its data_version also
        # moves when the write connection commits, so the change counter sees this
        # process's writes as well as other processes'.
        self._read_db = self._connect()
        self._buckets_db = sqlite3.connect(self.path.parent / self.BUCKETS_FILENAME, check_same_thread=False,
                                           isolation_level=None, timeout=BUSY_TIMEOUT)
        _ensure_wal(self._buckets_db)
        self._buckets_db.execute("PRAGMA synchronous=OFF")  # buckets need no durability
        self._buckets_db.execute("CREATE TABLE IF NOT EXISTS bucket (key TEXT PRIMARY KEY,"
                                 " tokens REAL NOT NULL, updated REAL NOT NULL)")
        self._responses_db = sqlite3.connect(self.path.parent / self.RESPONSES_FILENAME, check_same_thread=False,
                                             isolation_level=None, timeout=BUSY_TIMEOUT)
        _ensure_wal(self._responses_db)
        self._responses_db.execute("PRAGMA synchronous=NORMAL")
        self._responses_db.execute("CREATE TABLE IF NOT EXISTS response (id TEXT PRIMARY KEY,"
                                   " doc TEXT NOT NULL, expires REAL NOT NULL)")
        self._responses_db.execute("CREATE INDEX IF NOT EXISTS response_expires ON response (expires)")
        self._read_db.execute("PRAGMA data_version").fetchall()  # the read connection joins the WAL index
        try:
            self._wal_index = os.open(f"{self.path}-shm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._wal_index = None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            outermost = self._depth == 0
            if outermost:
                self._execute("BEGIN IMMEDIATE")
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outermost:
                    self._owner = None
                    self._execute("ROLLBACK")
                raise
            self._depth -= 1
            if outermost:
                self._owner = None
                self._execute("COMMIT")
                self._pinned.value = None  # this thread's next reading sees its own write

    def get(self, kind: str, record_id: str) -> Record | None:
        rows = self._read(f"SELECT id, doc, secret FROM {_table(kind)} WHERE id = ?", (record_id,))
        return record_from_row(rows[0]) if rows else None

    def scan(self, kind: str) -> list[Record]:
        return [record_from_row(row) for row in self._read(f"SELECT id, doc, secret FROM {_table(kind)} ORDER BY seq")]

    def put(self, kind: str, record: Record) -> None:
        self._write(
            f"INSERT INTO {_table(kind)} (id, doc, secret) VALUES (?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET doc = excluded.doc, secret = excluded.secret",
            (record.id, json.dumps(record.doc), record.secret))

    def delete(self, kind: str, record_id: str) -> bool:
        return self._write(f"DELETE FROM {_table(kind)} WHERE id = ?", (record_id,)) > 0

    def get_settings(self) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in self._read("SELECT key, value FROM settings")}

    def put_settings(self, values: dict[str, Any]) -> None:
        with self.transaction():
            for key, value in values.items():
                if value is None:
                    self._execute("DELETE FROM settings WHERE key = ?", (key,))
                else:
                    self._execute(
                        "INSERT INTO settings (key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, json.dumps(value)))

    def change_counter(self) -> int:
        pinned = self._pinned
        if not getattr(pinned, "active", False):
            return self._read_counter()
        if pinned.value is None:
            pinned.value = self._read_counter()
        return pinned.value

    def one_counter_reading(self) -> "_OneCounterReading":  # type: ignore[override]
        return self._one_reading  # its state is the thread's: one object serves every thread

    def _read_counter(self) -> int:
        """PRAGMA data_version, unless the WAL index header shows that nothing was committed
        since the last reading (a pread of 96 bytes instead of a statement: the statement
        cost tens of microseconds on a request that came after a pause).

        Every commit to the file, by any connection of any process, rewrites that header
        (its change count goes up, then its frame count and checksums) before any reader
        can see the commit, and the header is read before the statement: so an unchanged
        header means an unchanged answer. The file is SQLite's shared memory for the WAL
        (its format is shared by every SQLite version on the file, so it is fixed); while
        this store's connections are open no other process may remove or reset it."""
        if self._owner == threading.get_ident():  # this thread's own transaction: its connection
            rows = self._read("PRAGMA data_version")
            return int(rows[0][0]) if rows else 0
        header = self._wal_index_header()
        seen = self._counter_seen
        if header is not None and seen is not None and seen[0] == header:
            return seen[1]
        rows = self._read("PRAGMA data_version")
        counter = int(rows[0][0]) if rows else 0
        if header is not None:
            self._counter_seen = (header, counter)
        return counter

    def _wal_index_header(self) -> bytes | None:
        fd = self._wal_index
        if fd is None:
            return None
        try:
            header = os.pread(fd, WAL_INDEX_HEADER_BYTES, 0)
        except OSError:
            return None
        return header if len(header) == WAL_INDEX_HEADER_BYTES else None

    def take_token(self, key: str, capacity: float, per_second: float) -> float:
        with self._buckets_lock:
            db = self._buckets_db
            with write_transaction(db):
                row = db.execute("SELECT tokens, updated FROM bucket WHERE key = ?", (key,)).fetchone()
                now = time.time()  # wall time: the processes sharing the file share no other clock
                tokens, updated = row if row else (capacity, now)
                taken, tokens, wait = take(tokens, now - updated, capacity, per_second)
                db.execute("INSERT INTO bucket (key, tokens, updated) VALUES (?, ?, ?) ON CONFLICT(key) "
                           "DO UPDATE SET tokens = excluded.tokens, updated = excluded.updated",
                           (key, tokens, now))
        return 0.0 if taken else wait

    def put_responses(self, responses: Sequence[tuple[str, dict[str, Any], float]]) -> None:
        rows = [(response_id, dumps_json(doc).decode(), expires_at) for response_id, doc, expires_at in responses]
        purge = self.response_purge.due()
        with self._responses_lock:
            db = self._responses_db
            with write_transaction(db):
                if purge:
                    db.execute("DELETE FROM response WHERE expires <= ?", (time.time(),))
                db.executemany("INSERT INTO response (id, doc, expires) VALUES (?, ?, ?) ON CONFLICT(id)"
                               " DO UPDATE SET doc = excluded.doc, expires = excluded.expires", rows)

    def get_response(self, response_id: str) -> dict[str, Any] | None:
        rows = self._responses("SELECT doc FROM response WHERE id = ? AND expires > ?",
                               (response_id, time.time())).fetchall()
        return json.loads(rows[0][0]) if rows else None

    def delete_response(self, response_id: str) -> bool:
        return self._responses("DELETE FROM response WHERE id = ? AND expires > ?",
                               (response_id, time.time())).rowcount > 0

    def _responses(self, sql: str, params: tuple) -> sqlite3.Cursor:
        with self._responses_lock:
            try:
                return self._responses_db.execute(sql, params)
            except sqlite3.Error as exc:
                raise StoreError(f"store operation failed: {exc}") from exc

    def usage(self) -> UsageTables:
        return self._side_file(SQLiteUsage)

    def cache(self) -> CacheTable:
        return self._side_file(SQLiteCache)

    def memory(self) -> MemoryTable:
        return self._side_file(SQLiteMemory)

    def _side_file(self, kind: type[_Side]) -> _Side:
        """A file of tables beside this one (usage.db, cache.db, memory.db), opened once on
        first use: its file switches to WAL once, as the store's, under the set-up lock."""
        with self._usage_lock:
            opened = self._side_files.get(kind)
            if opened is None:
                with _setup_lock(self.path.parent):
                    opened = self._side_files[kind] = kind(self.path.parent, BUSY_TIMEOUT)
            return opened  # type: ignore[return-value]

    def close(self) -> None:
        with self._usage_lock:
            for opened in self._side_files.values():
                opened.close()
        with self._responses_lock:
            self._responses_db.close()
        with self._buckets_lock:
            self._buckets_db.close()
        with self._read_lock:
            if self._wal_index is not None:
                os.close(self._wal_index)
                self._wal_index = None
            self._read_db.close()
        with self._lock:
            self._db.close()

    # --- helpers ---------------------------------------------------------------

    def _write(self, sql: str, params: tuple) -> int:
        with self.transaction():
            return self._execute(sql, params).rowcount

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of a read: inside this thread's transaction on its connection (to see its
        own writes and keep its checks valid), else on the read connection."""
        if self._owner == threading.get_ident():
            with self._lock:
                return self._execute(sql, params).fetchall()
        with self._read_lock:
            try:
                return self._read_db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"store operation failed: {exc}") from exc

    def _execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"store operation failed: {exc}") from exc


class _OneCounterReading:
    """``SQLiteStore.one_counter_reading``: a plain context manager rather than a generator
    one (a generator, its wrapper and their calls on every request)."""

    __slots__ = ("_pinned",)

    def __init__(self, pinned: threading.local) -> None:
        self._pinned = pinned

    def __enter__(self) -> None:
        pinned = self._pinned
        pinned.active, pinned.value = True, None

    def __exit__(self, *exc_info: object) -> None:
        pinned = self._pinned
        pinned.active, pinned.value = False, None


@contextmanager
def _setup_lock(data_dir: Path) -> Iterator[None]:
    """Exclusive among processes opening ``data_dir`` (see SETUP_LOCK_FILENAME). A
    blocking flock: the kernel wakes the waiter when the holder closes the file,
    which it does at the end of the set-up, or by dying."""
    with open(data_dir / SETUP_LOCK_FILENAME, "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _ensure_wal(db: sqlite3.Connection) -> None:
    if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        db.execute("PRAGMA journal_mode=WAL")


def _table(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}")
    return kind


def record_from_row(row: tuple) -> Record:
    """A record from an (id, doc as JSON text, secret) row, as both backends store them."""
    return Record(id=row[0], doc=json.loads(row[1]), secret=row[2])
