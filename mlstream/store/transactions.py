"""SQLite write transactions, the one shape every SQLite file of the store writes in, and
the two bases of tables kept beside the records (``SQLiteFile``, ``PostgresTables``)."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import StoreError


@contextmanager
def write_transaction(db: sqlite3.Connection, what: str = "store operation") -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT on an autocommit connection (ROLLBACK on any error), its
    SQLite errors as StoreError naming ``what`` failed. ``BEGIN IMMEDIATE`` takes the file's
    write lock at once: writers of the file in other processes are serialised with it."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        raise StoreError(f"{what} failed: {exc}") from exc


Execute = Callable[[str, Sequence[Any]], list[tuple]]


class SQLiteFile:
    """A SQLite file of its own beside ``mlstream.db`` (the response cache, conversation
    memory): writes there never move the main file's change counter (which would reload
    every cache of the process) nor wait for its write lock. One connection, one short
    transaction at a time under a lock; ``BEGIN IMMEDIATE`` serialises writers of the file
    across processes. ``upgrades``: (a column a file made by an older release lacks, or
    None, and the statement that brings it), run when the column is missing."""

    def __init__(self, path: Path, busy_timeout: float, what: str, schema: Sequence[str],
                 upgrades: Sequence[tuple[str, str | None, str]] = ()) -> None:
        self._what = what
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout)
            if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            with write_transaction(self._db, f"setting up the {what}"):
                for sql in schema:
                    self._db.execute(sql)
                for table, column, sql in upgrades:
                    columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                    if column not in columns:
                        self._db.execute(sql)
        except (sqlite3.Error, StoreError) as exc:
            raise StoreError(f"cannot open the {what} at {path}: {exc}") from exc
        self._lock = threading.Lock()  # guards the connection: one short statement batch under it

    @contextmanager
    def _transaction(self) -> Iterator[Execute]:
        def execute(sql: str, params: Sequence[Any]) -> list[tuple]:
            return self._db.execute(sql, tuple(params)).fetchall()

        with self._lock, write_transaction(self._db, f"{self._what} operation"):
            yield execute

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PostgresTables:
    """Tables of the PostgreSQL store reached through its pool (``session``), with the SQL
    the SQLite ones run (``?`` placeholders become psycopg's ``%s``)."""

    def __init__(self, session: Callable[[], Any]) -> None:
        self._session = session

    @contextmanager
    def _transaction(self) -> Iterator[Execute]:
        with self._session() as conn:
            def execute(sql: str, params: Sequence[Any]) -> list[tuple]:
                cursor = conn.execute(sql.replace("?", "%s"), tuple(params))
                return cursor.fetchall() if cursor.description else []
            yield execute
