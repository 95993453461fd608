"""Processes opening one fresh data directory at once (``serve --workers``) never find
the store locked.

Switching a new SQLite file to WAL needs an exclusive lock that SQLite's busy handler
does not wait for when both connections already hold a shared one: before the set-up
lock, two processes released together by a barrier failed with "database is locked"
in about one round in ten (19 of 200 here). No sockets: processes and files only.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from mlstream.errors import StoreError
from mlstream.store.sqlite import SQLiteStore

from ..support.timeouts import SUBPROCESS_HANG_GUARD

ROUNDS = 60
PROCESSES = 3


def _open_rounds(tmp: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue) -> None:
    """Round after round, each on a fresh data directory: open the store and then its usage
    tables, the processes released together: before the store on even rounds, between the
    store and the usage tables (their own file) on odd ones. The same processes go through
    every round (a fork each round cost more than the rounds themselves); every open is
    a new connection and a new flock of the set-up lock, as in a process that just started."""
    for round_ in range(ROUNDS):
        data_dir = Path(tmp) / f"data-{round_}"
        store = None
        try:
            if round_ % 2:
                try:
                    store = SQLiteStore(data_dir)
                finally:  # released together whatever happened: the others must not wait in vain
                    barrier.wait(SUBPROCESS_HANG_GUARD)
            else:
                barrier.wait(SUBPROCESS_HANG_GUARD)
                store = SQLiteStore(data_dir)
            store.usage()
        except StoreError as exc:
            results.put((round_, str(exc)))
        else:
            results.put((round_, None))
        finally:
            if store is not None:
                store.close()


def test_processes_opening_a_fresh_data_directory_together_never_find_it_locked(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    processes = [context.Process(target=_open_rounds, args=(str(tmp_path), barrier, results))
                 for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=SUBPROCESS_HANG_GUARD) for _ in range(ROUNDS * PROCESSES)]
    finally:
        for process in processes:
            process.join(SUBPROCESS_HANG_GUARD)
            if process.exitcode is None:
                process.kill()
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    assert sorted(round_ for round_, _ in outcomes) == sorted(list(range(ROUNDS)) * PROCESSES)
    failures = [f"round {round_}: {outcome}" for round_, outcome in outcomes if outcome is not None]
    for round_ in range(ROUNDS):
        data_dir = tmp_path / f"data-{round_}"
        # Whoever won, the file ended up in WAL mode with every table there.
        with sqlite3.connect(data_dir / SQLiteStore.FILENAME) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'model'"
                              ).fetchone()[0] == 1
        with sqlite3.connect(data_dir / "usage.db") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert failures == []
