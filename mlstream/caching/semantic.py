"""Semantic matching's pure parts: what of a request is compared by meaning, and the vectors.

A request is split in two (``semantic_split``): its conversation as one text, which is
embedded and compared by cosine similarity, and the rest (sampling parameters, tools,
response format, ...), which must match exactly: it goes into the entry's *partition* with
the scope, the model, its version and the front's interface. Only a plain text
conversation is matched by meaning: a message holding an image, a tool call or a tool's
result (or anything else than text) makes the request exact-match only, as a paraphrase
of those is not the same question.

Vectors are kept as unit vectors of float32 (``vector_bytes``): the cosine of two is then
their dot product.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Mapping, Sequence

from ..speedups import FAST_DOT_PRODUCTS, dot_products

# The fields of a request that hold its conversation, and where ml-commons' _predict holds it.
CONVERSATION_FIELDS = ("system", "instructions", "messages", "prompt", "input", "inputs")
MAX_VECTOR_DIMENSIONS = 16384
# A look-up compares the newest this many entries of a group: with numpy 1,000 vectors of
# 1,536 take about 1 ms; in Python (the binary) ~75 ms, so it compares fewer.
MAX_CANDIDATES = 1000 if FAST_DOT_PRODUCTS else 200


def semantic_split(request: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The request's conversation as one text (role: text lines), and the request without
    it; None when it holds no conversation, or one that is not plain text."""
    parameters = request.get("parameters")
    if isinstance(parameters, Mapping) and not any(name in request for name in CONVERSATION_FIELDS):
        inner = semantic_split(parameters)  # ml-commons' _predict: {"parameters": {...}}
        if inner is None:
            return None
        return inner[0], {**request, "parameters": inner[1]}
    lines: list[str] = []
    for name in CONVERSATION_FIELDS:
        if name not in request:
            continue
        value = request[name]
        if name == "messages" or (name == "input" and isinstance(value, list)):
            if not isinstance(value, list) or not _messages_text(value, lines):
                return None
        else:
            text = _text(value)
            if text is None:
                return None
            lines.append(f"{name}: {text}")
    if not lines:
        return None
    rest = {name: value for name, value in request.items() if name not in CONVERSATION_FIELDS}
    return "\n".join(lines), rest


def _messages_text(messages: list[Any], lines: list[str]) -> bool:
    for message in messages:
        if not isinstance(message, Mapping) or set(message) - {"role", "content", "name", "type"}:
            return False  # tool calls, tool results, refusals...: exact match only
        role = message.get("role")
        if not isinstance(role, str) or role not in ("system", "developer", "user", "assistant"):
            return False
        if message.get("type") not in (None, "message"):
            return False
        text = _text(message.get("content"))
        if text is None:
            return False
        lines.append(f"{role}: {text}")
    return bool(messages)


def _text(content: Any) -> str | None:
    """A message's content as text: a string, or a list of text parts only."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        return None
    parts = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") not in ("text", "input_text", "output_text"):
            return None
        text = part.get("text")
        if not isinstance(text, str) or set(part) - {"type", "text"}:
            return None
        parts.append(text)
    return "".join(parts)


def vector_bytes(vector: Sequence[float]) -> bytes:
    """A vector as the cache keeps it: the unit vector, float32. ValueError: not a vector
    of finite numbers, or all zeros."""
    if not isinstance(vector, Sequence) or not 0 < len(vector) <= MAX_VECTOR_DIMENSIONS:
        raise ValueError("an embedding must be a list of 1 to 16384 numbers")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vector):
        raise ValueError("an embedding must hold numbers only")
    norm = math.sqrt(math.fsum(v * v for v in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise ValueError("an embedding must have a finite, non-zero length")
    return array("f", (v / norm for v in vector)).tobytes()


def best_match(query: bytes, candidates: Sequence[tuple[str, bytes]], threshold: float) -> tuple[str, float] | None:
    """The candidate (key, vector bytes) most similar to ``query``, if at least ``threshold``
    similar (cosine); vectors of another length (another embedding model) never match."""
    alike = [(key, data) for key, data in candidates if len(data) == len(query)]
    best: tuple[str, float] | None = None
    for (key, _), similarity in zip(alike, dot_products(query, [data for _, data in alike])):
        if similarity >= threshold and (best is None or similarity > best[1]):
            best = (key, float(similarity))
    return best
