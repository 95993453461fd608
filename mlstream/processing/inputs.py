"""The ``_predict`` body of a remote model: its three shapes, checked.

``input/MLInput.java`` and ``input/remote/RemoteInferenceMLInput.java`` (under
``common/src/main/java/org/opensearch/ml/common/``) give ``parameters`` (a remote call),
``text_docs`` (text embedding), ``query_text`` + ``text_docs`` (text similarity, i.e.
rerank); ``dataset/*InputDataSet.java`` the datasets the last two make.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest

ALGORITHMS = ("remote", "text_embedding", "text_similarity")
# Fields of ml-commons' ModelResultFilter: accepted and, for remote models, not applied
# (RemoteConnectorExecutor rebuilds each chunk's dataset without the filter).
_RESULT_FILTER_FIELDS = frozenset({"return_bytes", "return_number", "target_response",
                                   "target_response_positions"})
# MLInput's "algorithm" field: ml-commons' Java client always sends it, and the route (the
# URL's algorithm, else the model's function) decides: the body's value is skipped unread
# (RemoteInferenceMLInput and MLInput.parse skip fields they do not take).
_IGNORED_FIELDS = frozenset({"algorithm"})


@dataclass(frozen=True, slots=True)
class TextDocs:
    """``text_docs``: documents to embed (``dataset/TextDocsInputDataSet.java``)."""

    docs: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class TextSimilarity:
    """``query_text`` + ``text_docs``: documents to score against a query
    (``dataset/TextSimilarityInputDataSet.java``)."""

    query_text: str
    docs: tuple[str, ...]


Dataset = TextDocs | TextSimilarity


@dataclass(frozen=True, slots=True)
class PredictInput:
    parameters: Mapping[str, Any]
    dataset: Dataset | None     # None: a plain remote call on ``parameters``


def parse_predict_input(body: Any, algorithm: str | None = None) -> PredictInput:
    """The ``_predict`` body of a remote model, for ``algorithm`` (query ``?algorithm=``
    or ``/_predict/{algorithm}/{model_id}``); None lets the body's fields decide."""
    if algorithm is not None:
        algorithm = algorithm.lower()
        if algorithm not in ALGORITHMS:
            raise BadRequest(f"[algorithm] must be one of {', '.join(ALGORITHMS)} for a remote model, "
                             f"got [{algorithm}]")
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object with [parameters], or [text_docs] "
                         "(text embedding), or [query_text] and [text_docs] (text similarity)")
    unknown = sorted(set(body) - {"parameters", "text_docs", "query_text"} - _RESULT_FILTER_FIELDS - _IGNORED_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}]: a remote model takes [parameters], "
                         "[text_docs] or [query_text] with [text_docs]")
    parameters = body.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise BadRequest("[parameters] must be a JSON object")
    _check_result_filter(body)
    has_docs, has_query = "text_docs" in body, "query_text" in body
    if algorithm is None:
        algorithm = ("text_similarity" if has_query else "text_embedding") if has_docs else "remote"
    if algorithm == "remote":
        if has_docs or has_query:
            raise BadRequest("[text_docs] and [query_text] need algorithm text_embedding or "
                             "text_similarity; with algorithm remote send [parameters]")
        return PredictInput(parameters, None)
    docs = _text_docs(body, allow_null=algorithm == "text_embedding")
    if algorithm == "text_embedding":
        if has_query:
            raise BadRequest("[query_text] is for text_similarity; text_embedding takes [text_docs]")
        return PredictInput(parameters, TextDocs(docs))
    query = body.get("query_text")
    if not isinstance(query, str):
        raise BadRequest("text_similarity expects [query_text] (a string) and [text_docs]")
    return PredictInput(parameters, TextSimilarity(query, docs))  # type: ignore[arg-type]


def _text_docs(body: Mapping[str, Any], *, allow_null: bool) -> tuple[Any, ...]:
    docs = body.get("text_docs")
    kind = "strings (or null)" if allow_null else "strings"
    if not isinstance(docs, list) or not all(isinstance(d, str) or (allow_null and d is None) for d in docs):
        raise BadRequest(f"[text_docs] must be a list of {kind}")
    if not docs:
        raise BadRequest("[text_docs] must not be empty")
    return tuple(docs)


def _check_result_filter(body: Mapping[str, Any]) -> None:
    for name in ("return_bytes", "return_number"):
        if name in body and not isinstance(body[name], bool):
            raise BadRequest(f"[{name}] must be true or false")
    target = body.get("target_response")
    if target is not None and not (isinstance(target, list) and all(isinstance(t, str) for t in target)):
        raise BadRequest("[target_response] must be a list of strings")
    positions = body.get("target_response_positions")
    if positions is not None and not (isinstance(positions, list)
                                      and all(type(p) is int for p in positions)):
        raise BadRequest("[target_response_positions] must be a list of integers")
