"""Which store a process uses: SQLite in the data directory, or PostgreSQL at a URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from .sqlite import SQLiteStore, Store

POSTGRES_SCHEMES = ("postgresql", "postgres")


def is_postgres(location: str) -> bool:
    return urlsplit(location).scheme in POSTGRES_SCHEMES


def open_store(location: str, data_dir: Path) -> Store:
    """``location`` empty: SQLite in ``data_dir``; a postgresql:// URL: that database."""
    if location and is_postgres(location):
        from .postgres import PostgresStore
        return PostgresStore(location)
    return SQLiteStore(data_dir)

