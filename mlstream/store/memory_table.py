"""Conversation memory's tables (ml-commons' ``/_plugins/_ml/memory``), in whichever store
the deployment runs on.

    memory_conversation (id TEXT PRIMARY KEY, owner, created, updated, doc)
    memory_message      (id TEXT PRIMARY KEY, memory_id, created, parent_id, trace_number, doc)

A conversation ("memory") belongs to its owner (the caller's tenant and key); its messages
are listed oldest first, a message's traces (messages with a ``trace_number``, under a
``parent_id``) in trace order. Times are Unix nanoseconds, so two messages of one
conversation keep the order they were written in. SQLite keeps the tables in
``memory.db`` beside ``mlstream.db`` (a message written never moves the main file's change
counter); PostgreSQL in ``mlstream_memory_*`` (migration 10), with no NOTIFY trigger.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

from ..speedups import dumps_json
from .transactions import PostgresTables, SQLiteFile

# A search reads at most this many of an owner's conversations, or of one conversation's
# messages, newest first (the search language then runs over them in memory).
MAX_SEARCHED = 10_000


def schema(prefix: str, *, big: str) -> list[str]:
    return [(f"CREATE TABLE IF NOT EXISTS {prefix}memory_conversation (id TEXT PRIMARY KEY, owner TEXT NOT NULL,"
             f" created {big} NOT NULL, updated {big} NOT NULL, doc TEXT NOT NULL)"),
            (f"CREATE INDEX IF NOT EXISTS {prefix}memory_conversation_owner ON {prefix}memory_conversation"
             " (owner, updated)"),
            (f"CREATE TABLE IF NOT EXISTS {prefix}memory_message (id TEXT PRIMARY KEY, memory_id TEXT NOT NULL,"
             f" created {big} NOT NULL, parent_id TEXT, trace_number {big}, doc TEXT NOT NULL)"),
            (f"CREATE INDEX IF NOT EXISTS {prefix}memory_message_memory ON {prefix}memory_message"
             " (memory_id, created)"),
            (f"CREATE INDEX IF NOT EXISTS {prefix}memory_message_parent ON {prefix}memory_message"
             " (parent_id, trace_number)")]


POSTGRES_SCHEMA = schema("mlstream_", big="BIGINT")
SQLITE_SCHEMA = schema("", big="INTEGER")


class MemoryTable(ABC):
    """Every method is one short transaction."""

    _prefix = ""

    @abstractmethod
    def _transaction(self) -> Any:
        """A context manager giving an ``Execute`` inside one transaction."""

    def close(self) -> None:
        pass

    # --- conversations ---------------------------------------------------------------------

    def put_conversation(self, memory_id: str, owner: str, created: int, updated: int, doc: dict[str, Any]) -> None:
        """Keep a new conversation."""
        with self._transaction() as execute:
            execute(f"INSERT INTO {self._prefix}memory_conversation (id, owner, created, updated, doc)"
                    " VALUES (?, ?, ?, ?, ?)", (memory_id, owner, created, updated, _text(doc)))

    def update_conversation(self, memory_id: str, updated: int, doc: dict[str, Any]) -> bool:
        """A conversation's new document and updated time; False when it is gone."""
        with self._transaction() as execute:
            found = execute(f"SELECT 1 FROM {self._prefix}memory_conversation WHERE id = ?", (memory_id,))
            execute(f"UPDATE {self._prefix}memory_conversation SET updated = ?, doc = ? WHERE id = ?",
                    (updated, _text(doc), memory_id))
        return bool(found)

    def conversation(self, memory_id: str) -> tuple[str, dict[str, Any]] | None:
        """Its owner and document, or None."""
        with self._transaction() as execute:
            rows = execute(f"SELECT owner, doc FROM {self._prefix}memory_conversation WHERE id = ?", (memory_id,))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    def conversations(self, owner: str, start: int, size: int) -> list[tuple[str, dict[str, Any]]]:
        """An owner's conversations, the last updated first: ``size`` of them from ``start``."""
        with self._transaction() as execute:
            rows = execute(f"SELECT id, doc FROM {self._prefix}memory_conversation WHERE owner = ?"
                           " ORDER BY updated DESC, id LIMIT ? OFFSET ?", (owner, size, start))
        return [(memory_id, json.loads(doc)) for memory_id, doc in rows]

    def delete_conversation(self, memory_id: str) -> bool:
        """Delete a conversation and its messages; False when there was none."""
        p = self._prefix
        with self._transaction() as execute:
            found = execute(f"SELECT 1 FROM {p}memory_conversation WHERE id = ?", (memory_id,))
            execute(f"DELETE FROM {p}memory_message WHERE memory_id = ?", (memory_id,))
            execute(f"DELETE FROM {p}memory_conversation WHERE id = ?", (memory_id,))
        return bool(found)

    # --- messages ---------------------------------------------------------------------------

    def put_message(self, message_id: str, memory_id: str, created: int, parent_id: str | None,
                    trace_number: int | None, doc: dict[str, Any], conversation_doc: dict[str, Any] | None) -> bool:
        """Keep a new message and, given ``conversation_doc``, its conversation's new document
        and updated time, together; False (nothing kept) when the conversation is gone."""
        p = self._prefix
        with self._transaction() as execute:
            if not execute(f"SELECT 1 FROM {p}memory_conversation WHERE id = ?", (memory_id,)):
                return False
            execute(f"INSERT INTO {p}memory_message (id, memory_id, created, parent_id, trace_number, doc)"
                    " VALUES (?, ?, ?, ?, ?, ?)", (message_id, memory_id, created, parent_id, trace_number, _text(doc)))
            if conversation_doc is not None:
                execute(f"UPDATE {p}memory_conversation SET updated = ?, doc = ? WHERE id = ?",
                        (created, _text(conversation_doc), memory_id))
        return True

    def update_message(self, message_id: str, doc: dict[str, Any]) -> bool:
        """A message's new document; False when it is gone."""
        with self._transaction() as execute:
            found = execute(f"SELECT 1 FROM {self._prefix}memory_message WHERE id = ?", (message_id,))
            execute(f"UPDATE {self._prefix}memory_message SET doc = ? WHERE id = ?", (_text(doc), message_id))
        return bool(found)

    def message(self, message_id: str) -> tuple[str, dict[str, Any]] | None:
        """Its conversation's id and its document, or None."""
        with self._transaction() as execute:
            rows = execute(f"SELECT memory_id, doc FROM {self._prefix}memory_message WHERE id = ?", (message_id,))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    def messages(self, memory_id: str, start: int, size: int, *, newest_first: bool = False
                 ) -> list[tuple[str, dict[str, Any]]]:
        """A conversation's messages (not traces), oldest first: ``size`` of them from ``start``."""
        order = "DESC" if newest_first else "ASC"
        with self._transaction() as execute:
            rows = execute(f"SELECT id, doc FROM {self._prefix}memory_message WHERE memory_id = ? AND"
                           f" trace_number IS NULL ORDER BY created {order}, id {order} LIMIT ? OFFSET ?",
                           (memory_id, size, start))
        return [(message_id, json.loads(doc)) for message_id, doc in rows]

    def traces(self, parent_id: str, start: int, size: int) -> list[tuple[str, dict[str, Any]]]:
        """A message's traces, in trace order: ``size`` of them from ``start``."""
        with self._transaction() as execute:
            rows = execute(f"SELECT id, doc FROM {self._prefix}memory_message WHERE parent_id = ? AND"
                           " trace_number IS NOT NULL ORDER BY trace_number, created LIMIT ? OFFSET ?",
                           (parent_id, size, start))
        return [(message_id, json.loads(doc)) for message_id, doc in rows]


def _text(doc: dict[str, Any]) -> str:
    return dumps_json(doc).decode("utf-8")


class SQLiteMemory(SQLiteFile, MemoryTable):
    """``memory.db`` (``transactions.SQLiteFile``)."""

    FILENAME = "memory.db"

    def __init__(self, data_dir: Path, busy_timeout: float) -> None:
        SQLiteFile.__init__(self, data_dir / self.FILENAME, busy_timeout, "conversation memory", SQLITE_SCHEMA)


class PostgresMemory(PostgresTables, MemoryTable):
    """``mlstream_memory_*`` (migration 10) through the store's pool (``session``)."""

    _prefix = "mlstream_"

    def __init__(self, session: Callable[[], Any]) -> None:
        PostgresTables.__init__(self, session)
