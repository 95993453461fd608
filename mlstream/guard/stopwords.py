"""Stop-word indices: the few OpenSearch indices a ``local_regex`` guardrail reads.

mlstream has no search engine. ml-commons' guardrails tutorial fills its stop words with
the document API (create an index with a ``percolator`` field named ``query``, index
``query_string`` queries into it, one by one or in bulk), and the guardrail percolates
the checked text against them. This is that much of OpenSearch, and only for guardrails:
indices with mappings, documents by id, ``_bulk``, and ``percolate``. Indices and
documents are records of the store (two kinds), so they survive restarts and are shared
by every instance on one PostgreSQL; every change runs in one store transaction.

What OpenSearch answers, mlstream answers (shapes, statuses, error types), within limits
named below. Names that would clash with mlstream's own routes (anything starting with
``_``, ``v1``, ``healthz``, ``readyz``, ``metrics``) or that OpenSearch reserves for
hidden and system indices (a leading ``.``) are refused.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import (BadRequest, IndexExists, IndexNotFound, InvalidIndexName, MapperParsing, MLStreamError,
                     VersionConflict)
from .percolate import StoredQuery, compile_query, document
from ..store.sqlite import Record, Store

INDEX_KIND = "stopword_index"
DOC_KIND = "stopword_doc"
PERCOLATOR_FIELD = "query"  # the field ml-commons' percolate query names
# mlstream's own single-segment routes: an index may not take their names.
RESERVED_NAMES = frozenset({"v1", "healthz", "readyz", "metrics"})
_FORBIDDEN_CHARS = '\\/*?"<>| ,#:'
MAX_INDEX_NAME_BYTES = 255       # OpenSearch's limit
MAX_ID_BYTES = 512               # OpenSearch's limit
# Every document of an index is matched in turn on each guarded call: bounded, and far
# above what a stop-word list needs.
MAX_DOCUMENTS_PER_INDEX = 10_000
MAX_INDICES = 1_000
_SHARDS = {"total": 2, "successful": 1, "failed": 0}
_CREATE_FIELDS = frozenset({"settings", "mappings", "aliases"})


@dataclass(frozen=True, slots=True)
class BulkItem:
    action: str
    index: str | None
    doc_id: str | None
    source: Any


class StopWordIndices:
    def __init__(self, store: Store) -> None:
        self._store = store
        # Guards the compiled queries of each index: dict reads and writes only. A miss
        # reads the store with this lock released.
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, int, tuple[StoredQuery, ...]]] = {}  # index -> (counter, gen, queries)
        self._generation = 0

    # --- indices -------------------------------------------------------------------

    def create_index(self, name: str, body: Any) -> dict[str, Any]:
        check_index_name(name)
        body = {} if body is None else body
        if not isinstance(body, dict):
            raise BadRequest("the create index body must be an object")
        unknown = sorted(set(body) - _CREATE_FIELDS)
        if unknown:
            raise BadRequest(f"unknown key [{unknown[0]}] for create index")
        mappings = body.get("mappings", {})
        if not isinstance(mappings, dict) or not isinstance(mappings.get("properties", {}), dict):
            raise MapperParsing("[mappings] must be an object, with [properties] an object")
        with self._store.transaction():
            existing = self._store.get(INDEX_KIND, name)
            if existing is not None:
                raise IndexExists(f"index [{name}/{existing.doc['uuid']}] already exists")
            self._add_index(name, mappings, body.get("settings") or {})
        self._invalidate()
        return {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def get_index(self, name: str) -> dict[str, Any]:
        doc = self._index(name).doc
        settings = {"index": {**doc.get("settings", {}).get("index", {}), "creation_date": str(doc["created"]),
                              "number_of_shards": "1", "number_of_replicas": "1", "uuid": doc["uuid"],
                              "provided_name": name}}
        return {name: {"aliases": {}, "mappings": doc["mappings"], "settings": settings}}

    def delete_index(self, name: str) -> dict[str, Any]:
        with self._store.transaction():
            self._index(name)
            prefix = f"{name}/"
            for record in self._store.scan(DOC_KIND):
                if record.id.startswith(prefix):
                    self._store.delete(DOC_KIND, record.id)
            self._store.delete(INDEX_KIND, name)
        self._invalidate()
        return {"acknowledged": True}

    # --- documents -----------------------------------------------------------------

    def put_document(self, name: str, doc_id: str | None, source: Any, *, create: bool = False) -> tuple[int, dict]:
        """Index a document (``create``: only if it is new); (status, OpenSearch's answer)."""
        check_index_name(name)
        with self._store.transaction():
            status, answer = self._put(name, doc_id, source, create)
        self._invalidate()
        return status, answer

    def get_document(self, name: str, doc_id: str) -> tuple[int, dict[str, Any]]:
        self._index(name)
        record = self._store.get(DOC_KIND, f"{name}/{doc_id}")
        if record is None:
            return 404, {"_index": name, "_id": doc_id, "found": False}
        doc = record.doc
        return 200, {"_index": name, "_id": doc_id, "_version": doc["_version"], "_seq_no": doc["_seq_no"],
                     "_primary_term": 1, "found": True, "_source": doc["_source"]}

    def delete_document(self, name: str, doc_id: str) -> tuple[int, dict[str, Any]]:
        with self._store.transaction():
            status, answer = self._delete(name, doc_id)
        self._invalidate()
        return status, answer

    def bulk(self, default_index: str | None, raw: bytes) -> dict[str, Any]:
        """``_bulk``: NDJSON action lines (index, create, delete) each with its source line.
        A malformed request changes nothing; an item that fails is an item error."""
        started = time.monotonic()
        items = parse_bulk(raw, default_index)
        results: list[dict[str, Any]] = []
        with self._store.transaction():
            for item in items:
                try:
                    assert item.index is not None
                    check_index_name(item.index)
                    if item.action == "delete":
                        status, answer = self._delete(item.index, item.doc_id or "")
                    else:
                        status, answer = self._put(item.index, item.doc_id, item.source, item.action == "create")
                    results.append({item.action: {**answer, "status": status}})
                except MLStreamError as exc:
                    results.append({item.action: {"_index": item.index, "_id": item.doc_id, "status": exc.http_status,
                                                  "error": {"type": exc.error_type, "reason": exc.reason}}})
        self._invalidate()
        return {"took": int((time.monotonic() - started) * 1000),
                "errors": any("error" in next(iter(r.values())) for r in results), "items": results}

    # --- percolate -------------------------------------------------------------------

    def percolate(self, name: str, fields: tuple[str, ...], text: str) -> bool:
        """Whether a query stored in the index matches ``{field: text for each field}``.
        Raises when the index cannot be percolated (none, or no percolator field)."""
        queries = self._queries(name)
        doc = document({field: text for field in fields})
        return any(query.matches(doc) for query in queries)

    def _queries(self, name: str) -> tuple[StoredQuery, ...]:
        counter = self._store.change_counter()
        with self._lock:
            cached = self._cache.get(name)
            generation = self._generation
        if cached is not None and cached[0] == counter and cached[1] == generation:
            return cached[2]
        index = self._index(name)
        if not _has_percolator(index.doc["mappings"]):
            raise BadRequest(f"field [{PERCOLATOR_FIELD}] of index [{name}] is not of type [percolator]")
        prefix = f"{name}/"
        queries = tuple(compile_query(record.doc["_source"][PERCOLATOR_FIELD]) for record in self._store.scan(DOC_KIND)
                        if record.id.startswith(prefix) and PERCOLATOR_FIELD in record.doc["_source"])
        with self._lock:
            if generation == self._generation:
                self._cache[name] = (counter, generation, queries)
        return queries

    # --- inside a transaction ----------------------------------------------------------

    def _put(self, name: str, doc_id: str | None, source: Any, create: bool) -> tuple[int, dict[str, Any]]:
        if not isinstance(source, dict):
            raise MapperParsing("failed to parse: the document must be a JSON object")
        if doc_id is not None:
            check_doc_id(doc_id)
        index = self._store.get(INDEX_KIND, name)
        if index is None:  # as OpenSearch's action.auto_create_index: dynamic mappings
            index = self._add_index(name, {}, {})
        doc_id = doc_id or secrets.token_urlsafe(15)
        if _has_percolator(index.doc["mappings"]) and PERCOLATOR_FIELD in source:
            try:
                compile_query(source[PERCOLATOR_FIELD])
            except BadRequest as exc:
                raise MapperParsing(f"failed to parse field [{PERCOLATOR_FIELD}] of type [percolator] in document "
                                    f"with id '{doc_id}': {exc.reason}") from None
        key = f"{name}/{doc_id}"
        existing = self._store.get(DOC_KIND, key)
        if existing is not None and create:
            raise VersionConflict(f"[{doc_id}]: version conflict, document already exists (current version "
                                  f"[{existing.doc['_version']}])")
        if existing is None and self._count(name) >= MAX_DOCUMENTS_PER_INDEX:
            raise BadRequest(f"index [{name}] holds {MAX_DOCUMENTS_PER_INDEX} documents, the most a stop-word "
                             "index may hold")
        version = existing.doc["_version"] + 1 if existing is not None else 1
        seq_no = self._next_seq_no(index)
        self._store.put(DOC_KIND, Record(key, {"_version": version, "_seq_no": seq_no, "_source": source}))
        return (200 if existing is not None else 201), {
            "_index": name, "_id": doc_id, "_version": version, "result": "updated" if existing else "created",
            "_shards": _SHARDS, "_seq_no": seq_no, "_primary_term": 1}

    def _delete(self, name: str, doc_id: str) -> tuple[int, dict[str, Any]]:
        index = self._index(name)
        existing = self._store.get(DOC_KIND, f"{name}/{doc_id}")
        seq_no = self._next_seq_no(index)
        version = existing.doc["_version"] + 1 if existing is not None else 1
        if existing is not None:
            self._store.delete(DOC_KIND, f"{name}/{doc_id}")
        return (200 if existing else 404), {
            "_index": name, "_id": doc_id, "_version": version, "result": "deleted" if existing else "not_found",
            "_shards": _SHARDS, "_seq_no": seq_no, "_primary_term": 1}

    def _add_index(self, name: str, mappings: dict[str, Any], settings: dict[str, Any]) -> Record:
        if len(self._store.scan(INDEX_KIND)) >= MAX_INDICES:
            raise BadRequest(f"mlstream keeps at most {MAX_INDICES} stop-word indices")
        record = Record(name, {"mappings": mappings, "settings": settings, "uuid": secrets.token_urlsafe(16),
                               "created": int(time.time() * 1000), "seq_no": 0})
        self._store.put(INDEX_KIND, record)
        return record

    def _next_seq_no(self, index: Record) -> int:
        current = self._store.get(INDEX_KIND, index.id) or index
        seq_no = current.doc["seq_no"]
        self._store.put(INDEX_KIND, Record(index.id, {**current.doc, "seq_no": seq_no + 1}))
        return seq_no

    def _count(self, name: str) -> int:
        prefix = f"{name}/"
        return sum(1 for record in self._store.scan(DOC_KIND) if record.id.startswith(prefix))

    def _index(self, name: str) -> Record:
        record = self._store.get(INDEX_KIND, name)
        if record is None:
            raise IndexNotFound(f"no such index [{name}]")
        return record

    def _invalidate(self) -> None:
        with self._lock:
            self._cache.clear()
            self._generation += 1


def _has_percolator(mappings: dict[str, Any]) -> bool:
    field = mappings.get("properties", {}).get(PERCOLATOR_FIELD)
    return isinstance(field, dict) and field.get("type") == "percolator"


def check_index_name(name: str) -> None:
    """OpenSearch's index name rules, and mlstream's own routes kept out."""
    if not name:
        raise InvalidIndexName("Invalid index name [], must not be empty")
    if name != name.lower():
        raise InvalidIndexName(f"Invalid index name [{name}], must be lowercase")
    if any(c in _FORBIDDEN_CHARS for c in name):
        raise InvalidIndexName(f"Invalid index name [{name}], must not contain the following characters "
                               "[ , \", *, \\, <, |, ,, >, /, ?, #, :]")
    if name[0] in "_-+":
        raise InvalidIndexName(f"Invalid index name [{name}], must not start with '_', '-', or '+'")
    if name in (".", ".."):
        raise InvalidIndexName(f"Invalid index name [{name}], must not be '.' or '..'")
    if len(name.encode("utf-8")) > MAX_INDEX_NAME_BYTES:
        raise InvalidIndexName(f"Invalid index name [{name}], index name is too long")
    if name.startswith("."):
        raise InvalidIndexName(f"Invalid index name [{name}]: mlstream keeps no hidden or system indices "
                               "(stop-word indices only)")
    if name in RESERVED_NAMES:
        raise InvalidIndexName(f"Invalid index name [{name}]: /{name} is one of mlstream's own routes")


def check_doc_id(doc_id: str) -> None:
    if not doc_id:
        raise BadRequest("if _id is specified it must not be empty")
    if len(doc_id.encode("utf-8")) > MAX_ID_BYTES:
        raise BadRequest(f"id [{doc_id[:32]}...] is too long, must be no longer than {MAX_ID_BYTES} bytes")


def parse_bulk(raw: bytes, default_index: str | None) -> list[BulkItem]:
    """A ``_bulk`` body's items, or a 400 for the whole request (OpenSearch's words)."""
    if not raw.strip():
        raise BadRequest("request body is required")
    if not raw.endswith(b"\n"):
        raise BadRequest("The bulk request must be terminated by a newline [\\n]")
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise BadRequest("the bulk body is not valid UTF-8") from None
    items: list[BulkItem] = []
    number = 0
    while number < len(lines):
        line = lines[number].strip()
        number += 1
        if not line:
            continue
        action = _json_line(line, number, "action/metadata")
        if not isinstance(action, dict) or len(action) != 1:
            raise BadRequest(f"Malformed action/metadata line [{number}], expected START_OBJECT or END_OBJECT")
        (kind, meta), = action.items()
        if kind == "update":
            raise BadRequest(f"Malformed action/metadata line [{number}]: mlstream's stop-word indices take "
                             "[index], [create] and [delete] in _bulk, not [update]")
        if kind not in ("index", "create", "delete"):
            raise BadRequest(f"Malformed action/metadata line [{number}], expected field [create], [delete], "
                             f"[index] or [update] but found [{kind}]")
        if not isinstance(meta, dict):
            raise BadRequest(f"Malformed action/metadata line [{number}], expected an object for [{kind}]")
        index, doc_id = meta.get("_index", default_index), meta.get("_id")
        if not isinstance(index, str):
            raise BadRequest(f"Validation Failed: 1: index is missing for the action on line [{number}];")
        if doc_id is not None and not isinstance(doc_id, (str, int)):
            raise BadRequest(f"Malformed action/metadata line [{number}]: [_id] must be a string")
        doc_id = None if doc_id is None else str(doc_id)
        if kind == "delete":
            if doc_id is None:
                raise BadRequest(f"Validation Failed: 1: id is missing for the delete on line [{number}];")
            items.append(BulkItem(kind, index, doc_id, None))
            continue
        while number < len(lines) and not lines[number].strip():
            number += 1
        if number >= len(lines):
            raise BadRequest(f"the [{kind}] action on line [{number}] has no source line")
        source = _json_line(lines[number], number + 1, "source")
        number += 1
        items.append(BulkItem(kind, index, doc_id, source))
    if not items:
        raise BadRequest("Validation Failed: 1: no requests added;")
    return items


def _json_line(line: str, number: int, what: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise BadRequest(f"Malformed {what} line [{number}]: {exc}") from None
