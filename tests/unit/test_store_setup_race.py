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
from mlstream.store import SQLiteStore

ROUNDS = 60
PROCESSES = 3
HANG_GUARD = 30.0


def _open_at_once(data_dir: str, barrier: multiprocessing.synchronize.Barrier,
                  results: multiprocessing.Queue) -> None:
    barrier.wait(HANG_GUARD)
    try:
        SQLiteStore(Path(data_dir)).close()
    except StoreError as exc:
        results.put(str(exc))
    else:
        results.put(None)


def test_processes_opening_a_fresh_data_directory_together_never_find_it_locked(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    failures: list[str] = []
    for round_ in range(ROUNDS):
        data_dir = tmp_path / f"data-{round_}"
        barrier, results = context.Barrier(PROCESSES), context.Queue()
        processes = [context.Process(target=_open_at_once, args=(str(data_dir), barrier, results))
                     for _ in range(PROCESSES)]
        for process in processes:
            process.start()
        outcomes = [results.get(timeout=HANG_GUARD) for _ in processes]
        for process in processes:
            process.join(HANG_GUARD)
            assert process.exitcode == 0
        failures += [outcome for outcome in outcomes if outcome is not None]
        # Whoever won, the file ended up in WAL mode with every table there.
        with sqlite3.connect(data_dir / SQLiteStore.FILENAME) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'model'"
                              ).fetchone()[0] == 1
    assert failures == []
