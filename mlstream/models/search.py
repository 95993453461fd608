"""The `_search` routes: a small OpenSearch query subset over stored documents.

Supported: ``match_all``, ``term``/``terms`` (exact), ``match`` (case-insensitive
word match), ``ids``, ``exists`` and ``bool`` with ``must``/``filter``/``should``/
``must_not``; ``size``/``from``; ``_source`` false or a list of fields.
Field names may be dotted (``parameters.model``) and may carry OpenSearch's
``.keyword`` suffix.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import BadRequest

INDEX_OF = {"connector": ".plugins-ml-connector", "model": ".plugins-ml-model", "task": ".plugins-ml-task",
            "model_group": ".plugins-ml-model-group", "memory": ".plugins-ml-memory-meta",
            "message": ".plugins-ml-memory-message", "agent": ".plugins-ml-agent"}
DEFAULT_SIZE = 10


def document_written(index: str, doc_id: str, result: str) -> dict[str, Any]:
    """OpenSearch's document write response (what ml-commons answers an update or delete)."""
    return {"_index": index, "_id": doc_id, "_version": 1, "result": result,
            "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1}

MAX_RESULT_WINDOW = 10_000  # OpenSearch's index.max_result_window

Predicate = Callable[[str, dict[str, Any]], bool]


def run_search(kind: str, items: list[tuple[str, dict[str, Any]]], body: Any) -> dict[str, Any]:
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequest("the search body must be a JSON object")
    unknown = sorted(set(body) - {"query", "size", "from", "_source", "sort", "track_total_hits"})
    if unknown:
        raise BadRequest(f"unsupported search field [{', '.join(unknown)}]")
    size = _non_negative(body.get("size", DEFAULT_SIZE), "size")
    start = _non_negative(body.get("from", 0), "from")
    if size + start > MAX_RESULT_WINDOW:
        raise BadRequest(f"Result window is too large, from + size must be less than or equal to: "
                         f"[{MAX_RESULT_WINDOW}]")
    predicate = compile_query(body.get("query", {"match_all": {}}))
    matched = [(item_id, doc) for item_id, doc in items if predicate(item_id, doc)]
    source = body.get("_source", True)
    hits = [{"_index": INDEX_OF.get(kind, kind), "_id": item_id, "_version": 1, "_score": 1.0,
             **({"_source": _select(doc, source)} if source is not False else {})}
            for item_id, doc in matched[start:start + size]]
    return {"took": 0, "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"total": {"value": len(matched), "relation": "eq"},
                     "max_score": 1.0 if hits else None, "hits": hits}}


def compile_query(query: Any) -> Predicate:
    if not isinstance(query, dict) or len(query) != 1:
        raise BadRequest("a query must be an object with exactly one query type")
    (kind, spec), = query.items()
    if kind == "match_all":
        return lambda _id, _doc: True
    if kind == "ids":
        values = spec.get("values") if isinstance(spec, dict) else None
        if not isinstance(values, list):
            raise BadRequest("[ids] needs a [values] list")
        wanted = set(map(str, values))
        return lambda item_id, _doc: item_id in wanted
    if kind == "bool":
        return _bool_query(spec)
    if kind == "exists":
        field = spec.get("field") if isinstance(spec, dict) else None
        if not isinstance(field, str):
            raise BadRequest("[exists] needs a [field]")
        return lambda _id, doc: _lookup(doc, field) is not None
    if kind in ("term", "terms", "match"):
        field, value = _single_field(spec, kind)
        if isinstance(value, dict):
            value = value.get("value" if kind == "term" else "query")
        if kind == "terms":
            if not isinstance(value, list):
                raise BadRequest("[terms] needs a list of values")
            return lambda _id, doc: _lookup(doc, field) in value
        if kind == "term":
            return lambda _id, doc: _lookup(doc, field) == value
        words = str(value).lower().split()
        return lambda _id, doc: any(word in str(_lookup(doc, field) or "").lower().split() for word in words)
    raise BadRequest(f"unsupported query type [{kind}]")


def _bool_query(spec: Any) -> Predicate:
    if not isinstance(spec, dict):
        raise BadRequest("[bool] must be an object")
    clauses: dict[str, list[Predicate]] = {}
    for occur in ("must", "filter", "should", "must_not"):
        raw = spec.get(occur, [])
        raw = raw if isinstance(raw, list) else [raw]
        clauses[occur] = [compile_query(q) for q in raw]
    required = clauses["must"] + clauses["filter"]
    should, must_not = clauses["should"], clauses["must_not"]

    def predicate(item_id: str, doc: dict[str, Any]) -> bool:
        return (all(p(item_id, doc) for p in required)
                and not any(p(item_id, doc) for p in must_not)
                and (not should or bool(required) or any(p(item_id, doc) for p in should)))
    return predicate


def _single_field(spec: Any, kind: str) -> tuple[str, Any]:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise BadRequest(f"[{kind}] must name exactly one field")
    (field, value), = spec.items()
    return field.removesuffix(".keyword"), value


def _lookup(doc: Any, dotted: str) -> Any:
    if dotted == "_id":
        return None
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _select(doc: dict[str, Any], source: Any) -> dict[str, Any]:
    if source is True or source is None:
        return doc
    fields = [source] if isinstance(source, str) else source
    if not isinstance(fields, list) or not all(isinstance(field, str) for field in fields):
        raise BadRequest("[_source] must be a boolean, a field name or a list of field names")
    return {field: doc[field] for field in fields if field in doc}


def _non_negative(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"[{name}] must be a non-negative integer")
    return value
