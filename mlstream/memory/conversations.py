"""Conversation memory: ml-commons' ``/_plugins/_ml/memory`` conversations ("memories") and
their messages (interactions), kept in the store (``store.memory_table``).

    memory    {memory_id, create_time, updated_time, name, user?, application_type?,
               additional_info?}
    message   {memory_id, message_id, create_time, updated_time?, input?, prompt_template?,
               response?, origin?, additional_info?, parent_message_id?, trace_number?}

As ml-commons with its security plugin on, a memory is private to whoever made it: here
the API key (in its tenant) that created it. Another key's memory, or another tenant's,
answers exactly as one that does not exist (404), so ids reveal nothing; admin keys are no
exception. While no key exists every memory is everyone's and has no ``user``.

Times are ISO 8601 UTC with microseconds, as ml-commons writes its ``Instant`` fields.
Listing: memories the last updated first, messages oldest first, traces in trace order;
``max_results`` (default 10) and ``next_token`` (the offset of the next page, given when
there is one) page them as ml-commons does.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from ..access.keys import Caller
from ..errors import BadRequest, NotFound
from ..models.registry import new_id
from ..models.search import INDEX_OF, document_written, run_search
from ..store.memory_table import MAX_SEARCHED, MemoryTable

DEFAULT_MAX_RESULTS = 10
MAX_RESULTS = 10_000
# The fields each request takes (ml-commons' request classes); others are ignored, as there.
MEMORY_FIELDS = ("name", "application_type", "additional_info")
MESSAGE_FIELDS = ("input", "prompt_template", "response", "origin", "additional_info", "parent_message_id",
                  "trace_number")
MEMORY_UPDATE_FIELDS = ("name", "additional_info")      # UpdateConversationRequest's allowed list
MESSAGE_UPDATE_FIELDS = ("additional_info", "response")  # UpdateInteractionRequest's
MEMORY_INDEX, MESSAGE_INDEX = INDEX_OF["memory"], INDEX_OF["message"]


def iso_time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def memory_owner(caller: Caller | None) -> str:
    return "-" if caller is None else f"{caller.tenant.name}/{caller.key.key_id}"


class Conversations:
    def __init__(self, table: Callable[[], MemoryTable], clock: Callable[[], int] = time.time_ns) -> None:
        self._table = table  # the store's memory tables, opened on first use
        self._clock = clock

    # --- memories --------------------------------------------------------------------------

    def create(self, body: Any, caller: Caller | None) -> str:
        fields = _fields(body, MEMORY_FIELDS, required=False)
        name = fields.get("name")
        if name is not None and not isinstance(name, str):
            raise BadRequest("[name] must be a string")
        _check_strings(fields, "application_type")
        _check_info(fields)
        memory_id, now = new_id(), self._clock()
        doc: dict[str, Any] = {"create_time": iso_time(now), "updated_time": iso_time(now),
                               "name": name if name is not None else ""}
        if caller is not None:
            doc["user"] = caller.key.name
        doc.update({key: fields[key] for key in ("application_type", "additional_info") if key in fields})
        self._table().put_conversation(memory_id, memory_owner(caller), now, now, doc)
        return memory_id

    def get(self, memory_id: str, caller: Caller | None) -> dict[str, Any]:
        return {"memory_id": memory_id, **self._own(memory_id, caller)}

    def list(self, caller: Caller | None, query: Mapping[str, str]) -> dict[str, Any]:
        start, size = _page(query)
        rows = self._table().conversations(memory_owner(caller), start, size + 1)
        return _paged("memories", [{"memory_id": memory_id, **doc} for memory_id, doc in rows], start, size)

    def update(self, memory_id: str, body: Any, caller: Caller | None) -> dict[str, Any]:
        changes = _updates(body, MEMORY_UPDATE_FIELDS, "memory")
        if "name" in changes and not isinstance(changes["name"], str):
            raise BadRequest("[name] must be a string")
        _check_info(changes)
        doc = self._own(memory_id, caller)
        now = self._clock()
        doc.update(changes)
        doc["updated_time"] = iso_time(now)
        if not self._table().update_conversation(memory_id, now, doc):
            raise NotFound(f"Memory [{memory_id}] not found")
        return document_written(MEMORY_INDEX, memory_id, "updated")

    def delete(self, memory_id: str, caller: Caller | None) -> dict[str, Any]:
        self._own(memory_id, caller)
        self._table().delete_conversation(memory_id)
        return {"success": True}

    def search(self, body: Any, caller: Caller | None) -> dict[str, Any]:
        rows = self._table().conversations(memory_owner(caller), 0, MAX_SEARCHED)
        return run_search("memory", [(memory_id, {"memory_id": memory_id, **doc}) for memory_id, doc in rows], body)

    # --- messages ---------------------------------------------------------------------------

    def add_message(self, memory_id: str, body: Any, caller: Caller | None) -> str:
        fields = _fields(body, MESSAGE_FIELDS, required=True)
        _check_strings(fields, "input", "prompt_template", "response", "origin", "parent_message_id")
        _check_info(fields)
        if not any(isinstance(fields.get(name), str) and fields[name].strip()
                   for name in ("input", "prompt_template", "response", "origin")) and not fields.get("additional_info"):
            raise BadRequest("At least one of the following parameters must be non-empty: input, prompt_template, "
                             "response, origin, additional_info")
        trace = fields.get("trace_number")
        if trace is not None and (isinstance(trace, bool) or not isinstance(trace, int)):
            raise BadRequest("[trace_number] must be an integer")
        parent = fields.get("parent_message_id")
        memory = self._own(memory_id, caller)
        if parent is not None:
            found = self._table().message(parent)
            if found is None or found[0] != memory_id:
                raise NotFound(f"Message [{parent}] not found")
        return self._write_message(memory_id, memory, fields)

    def _write_message(self, memory_id: str, memory: dict[str, Any], fields: Mapping[str, Any]) -> str:
        message_id, now = new_id(), self._clock()
        doc = {"create_time": iso_time(now),
               **{name: fields[name] for name in MESSAGE_FIELDS if fields.get(name) is not None}}
        memory["updated_time"] = iso_time(now)
        if not self._table().put_message(message_id, memory_id, now, fields.get("parent_message_id"),
                                         fields.get("trace_number"), doc, memory):
            raise NotFound(f"Memory [{memory_id}] not found")
        return message_id

    # --- an agent's turn (agents.agents) -------------------------------------------------

    def start_turn(self, memory_id: str | None, question: str | None, app_type: str | None,
                   caller: Caller | None) -> tuple[str, str]:
        """A conversation's new question, as ml-commons' agent executor saves it: in the memory
        named (the caller's own), or a new one named after the question; its root message
        holds the question and an empty response until the answer comes."""
        if memory_id is None:
            memory_id = self.create({"name": question or "", **({"application_type": app_type} if app_type else {})},
                                    caller)
        memory = self._own(memory_id, caller)
        return memory_id, self._write_message(memory_id, memory, {"input": question, "response": ""})

    def add_trace(self, memory_id: str, parent_id: str, number: int, question: str | None, response: str,
                  origin: str, caller: Caller | None) -> None:
        """A tool's step of a turn: a trace of its root message."""
        self._write_message(memory_id, self._own(memory_id, caller),
                            {"input": question, "response": response, "origin": origin,
                             "parent_message_id": parent_id, "trace_number": number})

    def finish_turn(self, parent_id: str, changes: Mapping[str, Any], caller: Caller | None) -> None:
        """A message's fields changed (the caller's own): a turn's root message given its
        answer (``response``, ``additional_info``), or an update of a message."""
        _, doc = self._own_message(parent_id, caller)
        doc.update(changes)
        doc["updated_time"] = iso_time(self._clock())
        if not self._table().update_message(parent_id, doc):
            raise NotFound(f"Message [{parent_id}] not found")

    def get_message(self, message_id: str, caller: Caller | None) -> dict[str, Any]:
        memory_id, doc = self._own_message(message_id, caller)
        return _message(memory_id, message_id, doc)

    def update_message(self, message_id: str, body: Any, caller: Caller | None) -> dict[str, Any]:
        changes = _updates(body, MESSAGE_UPDATE_FIELDS, "message")
        _check_strings(changes, "response")
        _check_info(changes)
        self.finish_turn(message_id, changes, caller)
        return document_written(MESSAGE_INDEX, message_id, "updated")

    def messages(self, memory_id: str, caller: Caller | None, query: Mapping[str, str]) -> dict[str, Any]:
        self._own(memory_id, caller)
        start, size = _page(query)
        rows = self._table().messages(memory_id, start, size + 1)
        return _paged("messages", [_message(memory_id, message_id, doc) for message_id, doc in rows], start, size)

    def traces(self, message_id: str, caller: Caller | None, query: Mapping[str, str]) -> dict[str, Any]:
        memory_id, _ = self._own_message(message_id, caller)
        start, size = _page(query)
        rows = self._table().traces(message_id, start, size + 1)
        return _paged("traces", [_message(memory_id, trace_id, doc) for trace_id, doc in rows], start, size)

    def search_messages(self, memory_id: str, body: Any, caller: Caller | None) -> dict[str, Any]:
        self._own(memory_id, caller)
        rows = self._table().messages(memory_id, 0, MAX_SEARCHED, newest_first=True)
        return run_search("message", [(message_id, _message(memory_id, message_id, doc)) for message_id, doc in rows],
                          body)

    def history(self, memory_id: str, caller: Caller | None, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of a memory (no traces), oldest first: what a
        conversational agent reads as its chat history."""
        self._own(memory_id, caller)
        rows = self._table().messages(memory_id, 0, limit, newest_first=True)
        return [_message(memory_id, message_id, doc) for message_id, doc in reversed(rows)]

    # --- ownership ----------------------------------------------------------------------------

    def _own(self, memory_id: str, caller: Caller | None) -> dict[str, Any]:
        found = self._table().conversation(memory_id)
        if found is None or (found[0] != memory_owner(caller) and caller is not None):
            raise NotFound(f"Memory [{memory_id}] not found")
        return found[1]

    def _own_message(self, message_id: str, caller: Caller | None) -> tuple[str, dict[str, Any]]:
        found = self._table().message(message_id)
        if found is not None:
            memory = self._table().conversation(found[0])
            if memory is not None and (caller is None or memory[0] == memory_owner(caller)):
                return found
        raise NotFound(f"Message [{message_id}] not found")


def _message(memory_id: str, message_id: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"memory_id": memory_id, "message_id": message_id, **doc}


def _fields(body: Any, names: tuple[str, ...], *, required: bool) -> dict[str, Any]:
    if body is None and not required:
        return {}
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return {name: body[name] for name in names if name in body}


def _updates(body: Any, names: tuple[str, ...], what: str) -> dict[str, Any]:
    if not isinstance(body, dict) or not body:
        raise BadRequest(f"Failed to update {what}: Request body is empty")
    changes = {name: body[name] for name in names if name in body}
    if not changes:
        raise BadRequest(f"Failed to update {what}: the body names none of [{', '.join(names)}]")
    return changes


def _check_strings(fields: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if fields.get(name) is not None and not isinstance(fields[name], str):
            raise BadRequest(f"[{name}] must be a string")


def _check_info(fields: Mapping[str, Any]) -> None:
    info = fields.get("additional_info")
    if info is not None and not isinstance(info, dict):
        raise BadRequest("[additional_info] must be an object")


def _page(query: Mapping[str, str]) -> tuple[int, int]:
    def number(name: str, default: int, least: int) -> int:
        text = query.get(name)
        if text is None:
            return default
        if not text.strip().isdigit() or int(text) < least or int(text) > MAX_RESULTS:
            raise BadRequest(f"[{name}] must be a whole number from {least} to {MAX_RESULTS}, got [{text[:40]}]")
        return int(text)
    return number("next_token", 0, 0), number("max_results", DEFAULT_MAX_RESULTS, 1)


def _paged(field: str, items: list[dict[str, Any]], start: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {field: items[:size]}
    if len(items) > size:
        out["next_token"] = start + size
    return out


