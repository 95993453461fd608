"""A model's guardrails, as ml-commons reads and runs them (``Guardrails``,
``LocalRegexGuardrail``, ``ModelGuardrail``, ``StopWords``, ``MLGuard``).

    {"type": "local_regex" | "model",          (no type: local_regex)
     "input_guardrail":  {...},                checked before the provider is called
     "output_guardrail": {...}}                checked on the provider's non-stream answer

    local_regex  {"regex": [...], "stop_words": [{"index_name": ..., "source_fields": [...]}]}
        passes when no regex matches the whole text (Java's ``matches()``, ``javaregex``)
        and no query stored in a stop-word index matches a document holding the text in
        each source field (OpenSearch's percolate query, ``percolate`` and ``stopwords``)
    model        {"model_id": ..., "response_filter": ..., "response_validation_regex": ...}
        asks another registered model with ``{"question": <text>, "response_filter": ...}``
        and passes when its answer's ``response`` (as Gson writes it: a string in quotes)
        matches the regex

What is checked, as ml-commons checks it (``RemoteConnectorExecutor``, ``ConnectorUtils``):
the input is the rendered request body, and for a model guardrail the call's
``question`` parameter (none: it passes); the output is the provider's answer body, and
for a model guardrail that body JSON-escaped. Failures are closed (ml-commons #4904): a
stop-word index that cannot be searched or a guardrail model that fails rejects the call.

Parsing is pure; running takes the world it needs as a ``Checks`` value, so this module
has no I/O of its own.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import BadRequest, GuardrailTriggered, MLStreamError
from .regex import JavaPattern, compile_java

log = logging.getLogger(__name__)

TYPES = ("local_regex", "model")
INPUT_TRIGGERED = "guardrails triggered for user input"
OUTPUT_TRIGGERED = "guardrails triggered for LLM output"
# A guardrail model may have guardrails of its own: how deep the asking may go before the
# call is refused (a guardrail that names its own model would otherwise never end).
MAX_NESTED_GUARDRAIL_MODELS = 3
_FIELDS = frozenset({"type", "input_guardrail", "output_guardrail"})
_LOCAL_FIELDS = frozenset({"stop_words", "regex"})
_MODEL_FIELDS = frozenset({"model_id", "response_filter", "response_validation_regex"})
_STOP_WORDS_FIELDS = frozenset({"index_name", "source_fields"})


@dataclass(frozen=True, slots=True)
class StopWords:
    """A stop-word index and the document fields the checked text is put in."""

    index_name: str | None
    source_fields: tuple[str, ...] | None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.index_name is not None:
            doc["index_name"] = self.index_name
        if self.source_fields is not None:
            doc["source_fields"] = list(self.source_fields)
        return doc


@dataclass(frozen=True, slots=True)
class LocalRegexGuardrail:
    stop_words: tuple[StopWords, ...]
    regex: tuple[str, ...] | None
    patterns: tuple[JavaPattern, ...] = field(compare=False, repr=False, default=())

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.stop_words:
            doc["stop_words"] = [s.to_doc() for s in self.stop_words]
        if self.regex is not None:
            doc["regex"] = list(self.regex)
        return doc

    def indices(self) -> dict[str, tuple[str, ...]]:
        """Index -> fields, as ml-commons' stopWordsToMap (an entry without both is skipped;
        a later entry for the same index wins)."""
        return {s.index_name: s.source_fields for s in self.stop_words
                if s.index_name is not None and s.source_fields is not None}


@dataclass(frozen=True, slots=True)
class ModelGuardrail:
    model_id: str
    response_filter: str | None
    response_validation_regex: str
    pattern: JavaPattern = field(compare=False, repr=False, default=None)  # type: ignore[assignment]

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"model_id": self.model_id}
        if self.response_filter is not None:
            doc["response_filter"] = self.response_filter
        doc["response_validation_regex"] = self.response_validation_regex
        return doc


Guardrail = LocalRegexGuardrail | ModelGuardrail


@dataclass(frozen=True, slots=True)
class Guardrails:
    type: str
    input: Guardrail | None
    output: Guardrail | None

    def to_doc(self) -> dict[str, Any]:
        """ml-commons' toXContent: the model document's ``guardrails``."""
        doc: dict[str, Any] = {"type": self.type}
        if self.input is not None:
            doc["input_guardrail"] = self.input.to_doc()
        if self.output is not None:
            doc["output_guardrail"] = self.output.to_doc()
        return doc


def parse(value: Any) -> Guardrails | None:
    """A model's ``guardrails`` (register, update) checked and compiled; None for null.

    As ml-commons' ``Guardrails.parse``: no type is ``local_regex``, an empty or null
    guardrail is none. Beyond it, a field ml-commons would skip is refused (a misspelt
    ``input_guardrail`` must not silently guard nothing), as is a field of the wrong type,
    a regex that cannot be translated, and a model guardrail without its model or regex.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("[guardrails] must be an object")
    _known(value, _FIELDS, "guardrails")
    kind = value.get("type")
    if kind is None:
        kind = "local_regex"
    if kind not in TYPES:
        raise BadRequest("The type of guardrails is required, can not be null. "
                         f"[guardrails.type] is one of {', '.join(TYPES)}, got [{kind}]")
    return Guardrails(kind, _guardrail(kind, value.get("input_guardrail"), "input_guardrail"),
                      _guardrail(kind, value.get("output_guardrail"), "output_guardrail"))


def _guardrail(kind: str, params: Any, name: str) -> Guardrail | None:
    if params is None:
        return None
    if not isinstance(params, dict):
        raise BadRequest(f"[guardrails.{name}] must be an object")
    if not params:
        return None
    where = f"guardrails.{name}"
    if kind == "local_regex":
        _known(params, _LOCAL_FIELDS, where)
        regex = params.get("regex")
        if regex is not None and (not isinstance(regex, list) or not all(isinstance(r, str) for r in regex)):
            raise BadRequest(f"[{where}.regex] must be a list of strings")
        words = params.get("stop_words")
        if words is not None and not isinstance(words, list):
            raise BadRequest(f"[{where}.stop_words] must be a list")
        stop_words = tuple(_stop_words(entry, f"{where}.stop_words") for entry in words or ())
        regexes = tuple(regex) if regex else None  # ml-commons keeps an empty list as none
        return LocalRegexGuardrail(stop_words, regexes, tuple(compile_java(r) for r in regexes or ()))
    _known(params, _MODEL_FIELDS, where)
    model_id, response_filter = params.get("model_id"), params.get("response_filter")
    accept = params.get("response_validation_regex")
    if not isinstance(model_id, str) or not model_id:
        raise BadRequest(f"[{where}.model_id] is required: the model that checks the text")
    if response_filter is not None and not isinstance(response_filter, str):
        raise BadRequest(f"[{where}.response_filter] must be a string")
    if not isinstance(accept, str):
        raise BadRequest(f"[{where}.response_validation_regex] is required: a regex the guardrail model's "
                         "answer must match for the text to pass")
    return ModelGuardrail(model_id, response_filter, accept, compile_java(accept))


def _stop_words(entry: Any, where: str) -> StopWords:
    if not isinstance(entry, dict):
        raise BadRequest(f"[{where}] entries must be objects")
    _known(entry, _STOP_WORDS_FIELDS, where)
    index, fields = entry.get("index_name"), entry.get("source_fields")
    if index is not None and not isinstance(index, str):
        raise BadRequest(f"[{where}.index_name] must be a string")
    if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
        raise BadRequest(f"[{where}.source_fields] must be a list of strings")
    return StopWords(index, tuple(fields) if fields is not None else None)


def _known(value: dict[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(value) - known)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in [{where}]: it takes {', '.join(sorted(known))}")


# --- running them -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checks:
    """What running a guardrail asks of the world."""

    # (index, fields, text) -> whether a query stored in the index matches a document
    # holding the text in each field; raises when the index cannot be searched.
    percolate: Callable[[str, tuple[str, ...], str], bool]
    # (model id, parameters) -> that model's predict answer's ``dataAsMap["response"]``.
    ask_model: Callable[[str, dict[str, Any]], Any]


def check_input(guardrails: Guardrails | None, payload: str, parameters: Mapping[str, Any],
                checks: Checks | None) -> None:
    """Before the provider is called: raise GuardrailTriggered when the input guardrail refuses."""
    if guardrails is None or guardrails.input is None:
        return
    if not validate(guardrails.input, payload, parameters, checks):
        log.info("guardrails triggered for user input")
        raise GuardrailTriggered(INPUT_TRIGGERED)


def check_output(guardrails: Guardrails | None, response: str, checks: Checks | None) -> None:
    """On the provider's answer: raise GuardrailTriggered when the output guardrail refuses."""
    if guardrails is None or guardrails.output is None:
        return
    if not validate(guardrails.output, response, {"question": gson_escaped(response)}, checks):
        log.info("guardrails triggered for LLM output")
        raise GuardrailTriggered(OUTPUT_TRIGGERED)


def validate(guardrail: Guardrail, text: str, parameters: Mapping[str, Any], checks: Checks | None) -> bool:
    """Whether the text passes (``Guardrail.validate``)."""
    if isinstance(guardrail, LocalRegexGuardrail):
        if any(pattern.matches(text) for pattern in guardrail.patterns):
            return False
        for index, fields in guardrail.indices().items():
            try:
                if checks is None:
                    raise MLStreamError("no stop-word store")
                if checks.percolate(index, fields, text):
                    return False
            except MLStreamError as exc:
                log.error("failed to search stop words index %s, rejecting the text as a safety measure: %s",
                          index, exc.reason)
                return False
        return True
    question = parameters.get("question")
    if question is not None and not isinstance(question, str):
        question = json.dumps(question, ensure_ascii=False, separators=(",", ":"))
    if not question:
        return True  # ml-commons: "Guardrail request is empty."
    return _ask(guardrail, question, checks)


_depth = threading.local()


def _ask(guardrail: ModelGuardrail, question: str, checks: Checks | None) -> bool:
    depth = getattr(_depth, "value", 0)
    if depth >= MAX_NESTED_GUARDRAIL_MODELS or checks is None:
        log.error("guardrail model %s not asked (%s), rejecting the text as a safety measure", guardrail.model_id,
                  "nested too deep" if checks is not None else "no way to ask it")
        return False
    parameters: dict[str, Any] = {"question": question}
    if guardrail.response_filter:
        parameters["response_filter"] = guardrail.response_filter
    _depth.value = depth + 1
    try:
        answer = checks.ask_model(guardrail.model_id, parameters)
    except MLStreamError as exc:
        log.error("guardrail model %s failed, rejecting the text as a safety measure: %s",
                  guardrail.model_id, exc.reason)
        return False
    finally:
        _depth.value = depth
    return guardrail.pattern.matches(gson_json(answer))


def gson_escaped(text: str) -> str:
    """ml-commons' ``StringUtils.processTextDoc``: the text as a JSON string, without its quotes."""
    return gson_json(text)[1:-1]


def gson_json(value: Any) -> str:
    """``value`` as ml-commons' Gson writes it (no HTML escaping, nulls kept, numbers as doubles)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return _java_double(float(value))
    if isinstance(value, dict):
        return "{" + ",".join(f"{gson_json(str(k))}:{gson_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(gson_json(v) for v in value) + "]"
    return gson_json(str(value))


def _java_double(number: float) -> str:
    """Java's ``Double.toString`` for the values JSON carries (1 -> 1.0, 1e20 -> 1.0E20)."""
    if math.isnan(number) or math.isinf(number):
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    if number == 0 or 1e-3 <= abs(number) < 1e7:
        text = repr(number)
        return text if "e" not in text else format(number, "f")
    exact = Decimal(repr(abs(number))).normalize()  # repr: the shortest digits, as Java's
    digits = "".join(map(str, exact.as_tuple().digits))
    return f"{'-' if number < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{exact.adjusted()}"
