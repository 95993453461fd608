"""The response cache's table, in whichever store the deployment runs on.

    cache_entry (key TEXT PRIMARY KEY, scope, model_id, size, created, expires, doc,
                 semantic_group, vector)

One row per entry (``caching.Entry`` as JSON); ``created`` and ``expires`` in Unix seconds.
An entry of a semantic cache also has its conversation's unit vector (float32 bytes) and
its group (the hash of everything that must match exactly): ``similar`` reads a group's
newest vectors.
SQLite keeps it in ``cache.db`` beside ``mlstream.db`` (an entry written never moves the
main file's change counter, which would empty every cache of the process, nor waits for
its write lock); PostgreSQL in ``mlstream_cache_entry`` (migration 8), with no NOTIFY
trigger, so every host on the database reads the same entries.

Both run the same SQL (``?`` placeholders, ``%s`` for psycopg). A write is one
transaction: the entry, then, when the table is over its size cap, the oldest entries
out until it fits; expired entries go at most once a minute (``Paced``).
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

from ..speedups import dumps_json
from .transactions import PostgresTables, SQLiteFile
PURGE_SECONDS = 60.0  # expired entries are deleted at most this often (reads skip them anyway)


def schema(prefix: str, *, big: str, real: str) -> list[str]:
    return [(f"CREATE TABLE IF NOT EXISTS {prefix}cache_entry (key TEXT PRIMARY KEY, scope TEXT NOT NULL,"
             f" model_id TEXT NOT NULL, size {big} NOT NULL, created {real} NOT NULL, expires {real} NOT NULL,"
             " doc TEXT NOT NULL)"),
            f"CREATE INDEX IF NOT EXISTS {prefix}cache_entry_created ON {prefix}cache_entry (created)",
            f"CREATE INDEX IF NOT EXISTS {prefix}cache_entry_expires ON {prefix}cache_entry (expires)"]


def semantic_columns(prefix: str, *, blob: str) -> list[tuple[str | None, str]]:
    """What semantic matching added to the table (PostgreSQL migration 9; SQLite on open):
    (the column a statement adds, or None, and the statement)."""
    return [("semantic_group", f"ALTER TABLE {prefix}cache_entry ADD COLUMN semantic_group TEXT"),
            ("vector", f"ALTER TABLE {prefix}cache_entry ADD COLUMN vector {blob}"),
            (None, (f"CREATE INDEX IF NOT EXISTS {prefix}cache_entry_semantic ON {prefix}cache_entry"
                    " (semantic_group, created)"))]


POSTGRES_SCHEMA = schema("mlstream_", big="BIGINT", real="DOUBLE PRECISION")
POSTGRES_SEMANTIC = semantic_columns("mlstream_", blob="BYTEA")
SQLITE_SCHEMA = schema("", big="INTEGER", real="REAL")
SQLITE_SEMANTIC = semantic_columns("", blob="BLOB")


class CacheTable(ABC):
    """The entries of one store. Every method is one short transaction or read."""

    _prefix = ""

    def __init__(self) -> None:
        self._purged = 0.0
        self._purge_lock = threading.Lock()

    @abstractmethod
    def _transaction(self) -> Any:
        """A context manager giving an ``Execute`` inside one transaction."""

    def close(self) -> None:
        pass

    def get(self, key: str, now: float | None = None) -> tuple[dict[str, Any], float] | None:
        """The entry's document and when it was made (Unix seconds), unless missing or expired."""
        now = time.time() if now is None else now
        with self._transaction() as execute:
            rows = execute(f"SELECT doc, created FROM {self._prefix}cache_entry WHERE key = ? AND expires > ?",
                           (key, now))
        return (json.loads(rows[0][0]), float(rows[0][1])) if rows else None

    def similar(self, group: str, now: float | None = None, limit: int = 1000) -> list[tuple[str, bytes]]:
        """The (key, vector) of a semantic group's live entries, newest first."""
        now = time.time() if now is None else now
        with self._transaction() as execute:
            rows = execute(f"SELECT key, vector FROM {self._prefix}cache_entry WHERE semantic_group = ?"
                           " AND expires > ? AND vector IS NOT NULL ORDER BY created DESC LIMIT ?",
                           (group, now, limit))
        return [(key, bytes(vector)) for key, vector in rows]

    def put(self, key: str, scope: str, model_id: str, doc: dict[str, Any], ttl_s: float, max_bytes: int,
            now: float | None = None, semantic: tuple[str, bytes] | None = None) -> tuple[int, int]:
        """Keep an entry (replacing one under the same key), with its semantic group and
        vector if it has them, then make the table fit ``max_bytes``, oldest first. The
        table's entries and bytes after it."""
        now = time.time() if now is None else now
        text = dumps_json(doc).decode("utf-8")
        group, vector = semantic if semantic is not None else (None, None)
        size = len(text.encode("utf-8")) + len(key) + (len(vector) if vector is not None else 0)
        p = self._prefix
        purge = self._purge_due(now)
        with self._transaction() as execute:
            if purge:
                execute(f"DELETE FROM {p}cache_entry WHERE expires <= ?", (now,))
            execute(f"INSERT INTO {p}cache_entry (key, scope, model_id, size, created, expires, doc, semantic_group,"
                    " vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET"
                    " scope = excluded.scope, model_id = excluded.model_id, size = excluded.size,"
                    " created = excluded.created, expires = excluded.expires, doc = excluded.doc,"
                    " semantic_group = excluded.semantic_group, vector = excluded.vector",
                    (key, scope, model_id, size, now, now + ttl_s, text, group, vector))
            entries, total = execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {p}cache_entry", ())[0]
            if total > max_bytes:
                # The oldest entries whose sizes, summed from the oldest, cover the excess.
                excess = int(total) - max_bytes
                rows = execute(f"SELECT key, size FROM {p}cache_entry ORDER BY created", ())
                doomed: list[str] = []
                for old_key, old_size in rows:
                    if excess <= 0:
                        break
                    doomed.append(old_key)
                    excess -= int(old_size)
                for start in range(0, len(doomed), 500):
                    part = doomed[start:start + 500]
                    execute(f"DELETE FROM {p}cache_entry WHERE key IN ({','.join('?' * len(part))})", part)
                entries, total = execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {p}cache_entry", ())[0]
        return int(entries), int(total)

    def delete(self, model_id: str | None = None, scope: str | None = None) -> int:
        """Delete the entries of a model, of a scope, of both, or every one: how many went."""
        where, params = [], []
        if model_id is not None:
            where.append("model_id = ?")
            params.append(model_id)
        if scope is not None:
            where.append("(scope = ? OR scope LIKE ?)")
            params += [scope, scope + "/%"]
        sql = f"DELETE FROM {self._prefix}cache_entry" + (f" WHERE {' AND '.join(where)}" if where else "")
        with self._transaction() as execute:
            count = execute(f"SELECT COUNT(*) FROM {self._prefix}cache_entry"
                            + (f" WHERE {' AND '.join(where)}" if where else ""), params)[0][0]
            execute(sql, params)
        return int(count)

    def stats(self, now: float | None = None) -> tuple[int, int]:
        """Live entries and their bytes."""
        now = time.time() if now is None else now
        with self._transaction() as execute:
            entries, total = execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {self._prefix}cache_entry"
                                     " WHERE expires > ?", (now,))[0]
        return int(entries), int(total)

    def _purge_due(self, now: float) -> bool:
        with self._purge_lock:
            if now - self._purged < PURGE_SECONDS:
                return False
            self._purged = now
            return True


class SQLiteCache(SQLiteFile, CacheTable):
    """``cache.db`` (``transactions.SQLiteFile``)."""

    FILENAME = "cache.db"

    def __init__(self, data_dir: Path, busy_timeout: float) -> None:
        CacheTable.__init__(self)
        # A cache.db made before semantic matching gains its columns.
        SQLiteFile.__init__(self, data_dir / self.FILENAME, busy_timeout, "response cache", SQLITE_SCHEMA,
                            [("cache_entry", column, sql) for column, sql in SQLITE_SEMANTIC])


class PostgresCache(PostgresTables, CacheTable):
    """``mlstream_cache_entry`` (migrations 8 and 9) through the store's pool (``session``)."""

    _prefix = "mlstream_"

    def __init__(self, session: Callable[[], Any]) -> None:
        CacheTable.__init__(self)
        PostgresTables.__init__(self, session)
