"""SQLite write transactions, the one shape every SQLite file of the store writes in."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Iterator

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
