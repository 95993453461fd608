"""The SQLite change counter read through the WAL index header: a statement only after a commit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlstream.store.sqlite import Record, SQLiteStore

from ..support.timeouts import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stores(tmp_path: Path):
    mine, theirs = SQLiteStore(tmp_path), SQLiteStore(tmp_path)
    yield mine, theirs
    mine.close()
    theirs.close()


def counting_statements(store: SQLiteStore) -> list[str]:
    asked: list[str] = []
    read = store._read

    def counted(sql: str, params: tuple = ()) -> list[tuple]:
        asked.append(sql)
        return read(sql, params)

    store._read = counted  # type: ignore[method-assign]
    return asked


def test_an_unchanged_store_is_answered_without_a_statement(stores) -> None:
    mine, _ = stores
    assert mine._wal_index is not None  # the shortcut is in use on this machine
    first = mine.change_counter()
    asked = counting_statements(mine)
    assert [mine.change_counter() for _ in range(5)] == [first] * 5
    assert asked == []


def test_every_commit_by_another_connection_or_this_one_moves_it_at_once(stores) -> None:
    mine, theirs = stores
    seen = {mine.change_counter()}
    for index in range(20):
        (theirs if index % 2 else mine).put("apikey", Record(f"k{index}", {"role": "user"}, f"h{index}"))
        now = mine.change_counter()
        assert now not in seen, index  # the very next reading, no wait
        seen.add(now)
        assert mine.change_counter() == now
    assert mine.get("apikey", "k19") is not None


def test_a_commit_by_another_process_moves_it_at_once(tmp_path: Path) -> None:
    mine = SQLiteStore(tmp_path)
    try:
        before = mine.change_counter()
        assert mine.change_counter() == before
        script = ("import sys; from pathlib import Path; from mlstream.store.sqlite import Record, SQLiteStore; "
                  "s = SQLiteStore(Path(sys.argv[1])); "
                  "s.put('apikey', Record('k', {'role': 'admin'}, 'h')); s.close()")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=HANG_GUARD, env=env)
        assert mine.change_counter() != before
        assert mine.get("apikey", "k") is not None
    finally:
        mine.close()


def test_without_a_readable_wal_index_every_reading_asks_sqlite(stores) -> None:
    mine, theirs = stores
    os.close(mine._wal_index)
    mine._wal_index = None
    before = mine.change_counter()
    asked = counting_statements(mine)
    assert mine.change_counter() == before and asked == ["PRAGMA data_version"]
    theirs.put("apikey", Record("k", {"role": "user"}, "h"))
    assert mine.change_counter() != before
