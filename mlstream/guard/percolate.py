"""OpenSearch's percolate query, small: stored queries matched against one document.

ml-commons checks stop words by percolating a document ``{field: text, ...}`` against
the queries stored in the index's ``query`` field (type ``percolator``); one matching
query is a hit. mlstream has no search engine, so this module analyses text and matches
the queries the guardrails tutorial and ml-commons' tests store, and refuses the rest when
the document holding them is indexed (as OpenSearch refuses a query it cannot parse):

    query_string   terms, "phrases", field:term, field:"phrase", field:*, wildcards
                   (* and ? in a term), AND / OR / NOT, && / || / !, +term / -term,
                   (groups), ^boosts (ignored); default_field / fields, default_operator
    match          a text, operator or / and
    match_phrase   a text, its words next to each other in order (slop 0)
    term, terms    exact words (not analysed, as OpenSearch)
    bool           must, filter, should, must_not, minimum_should_match (a count)
    match_all

Text is analysed as OpenSearch's ``standard`` analyzer does, near enough: lower case,
split into words on Unicode word boundaries (letters, digits and ``_``; a single ``'``,
``.`` or ``:`` between two word characters stays inside the word, as UAX #29 keeps
"don't", "u.s.a" and "3.14"). Stop-word checks care about words and phrases, which this
keeps; scoring, stemming and synonyms are not there to differ.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import BadRequest

_WORDS = re.compile(r"\w+(?:['\u2019.:]\w+)*")
# A stored query nested deeper than this is refused (each level is a Python call).
MAX_QUERY_DEPTH = 32
ALL_FIELDS = "*"

Document = Mapping[str, list[str]]  # field -> its analysed words
Matcher = Callable[[Document], bool]


def analyze(text: str) -> list[str]:
    """The words of ``text``, as the standard analyzer gives them (lower-cased)."""
    return [word.lower() for word in _WORDS.findall(text)]


def document(fields: Mapping[str, str]) -> Document:
    """A document to percolate: each field's text analysed once."""
    return {name: analyze(value) for name, value in fields.items()}


@dataclass(frozen=True, slots=True)
class StoredQuery:
    """One query of a percolator field, compiled."""

    source: Any
    matcher: Matcher

    def matches(self, doc: Document) -> bool:
        return self.matcher(doc)


def compile_query(query: Any) -> StoredQuery:
    """A stored query, checked and compiled; a 400 (what OpenSearch says at index time) if not."""
    return StoredQuery(query, _compile(query, 0))


def _compile(query: Any, depth: int) -> Matcher:
    if depth > MAX_QUERY_DEPTH:
        raise BadRequest(f"the query is nested deeper than {MAX_QUERY_DEPTH} levels")
    if not isinstance(query, dict) or len(query) != 1:
        raise BadRequest("a query must be an object with exactly one query type")
    (kind, spec), = query.items()
    if kind == "match_all":
        return lambda doc: True
    if kind == "bool":
        return _bool(spec, depth)
    if kind == "query_string":
        return _query_string(spec)
    if kind in ("match", "match_phrase", "term", "terms"):
        field, value = _one_field(kind, spec)
        return _field_query(kind, field, value)
    raise BadRequest(f"the query type [{kind}] is not supported in a stop-word index: use query_string, match, "
                     "match_phrase, term, terms, bool or match_all")


def _one_field(kind: str, spec: Any) -> tuple[str, Any]:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise BadRequest(f"[{kind}] takes exactly one field")
    (field, value), = spec.items()
    return field, value


def _field_query(kind: str, field: str, value: Any) -> Matcher:
    options: dict[str, Any] = {}
    if isinstance(value, dict) and kind != "terms":
        options = dict(value)
        value = options.pop("value" if kind == "term" else "query", None)
        allowed = {"match": {"operator", "boost"}, "match_phrase": {"slop", "boost"}, "term": {"boost"}}[kind]
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise BadRequest(f"[{kind}] does not support [{', '.join(unknown)}] in a stop-word index")
    if kind == "terms":
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
            raise BadRequest("[terms] needs a list of values")
        wanted = {str(v) for v in value}
        return lambda doc: any(word in wanted for word in _words(doc, field))
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise BadRequest(f"[{kind}] needs a text")
    if kind == "term":
        exact = str(value)
        return lambda doc: exact in _words(doc, field)
    words = analyze(str(value))
    if kind == "match_phrase":
        if options.get("slop", 0) != 0:
            raise BadRequest("[match_phrase] takes slop 0 only in a stop-word index")
        return _phrase(field, words)
    operator = str(options.get("operator", "or")).lower()
    if operator not in ("or", "and"):
        raise BadRequest("[match] operator is or or and")
    return _words_query(field, words, operator == "and")


def _words(doc: Document, field: str) -> list[str]:
    if field == ALL_FIELDS:
        return [word for words in doc.values() for word in words]
    return doc.get(field.removesuffix(".keyword"), [])


def _fields(doc: Document, field: str) -> list[list[str]]:
    return list(doc.values()) if field == ALL_FIELDS else [doc.get(field, [])]


def _words_query(field: str, words: list[str], every: bool) -> Matcher:
    if not words:
        return lambda doc: False  # zero_terms_query: none
    wanted = set(words)

    def matches(doc: Document) -> bool:
        found = wanted & set(_words(doc, field))
        return found == wanted if every else bool(found)
    return matches


def _phrase(field: str, words: list[str]) -> Matcher:
    if not words:
        return lambda doc: False
    size = len(words)

    def matches(doc: Document) -> bool:
        return any(values[i:i + size] == words
                   for values in _fields(doc, field) for i in range(len(values) - size + 1))
    return matches


def _bool(spec: Any, depth: int) -> Matcher:
    if not isinstance(spec, dict):
        raise BadRequest("[bool] must be an object")
    unknown = sorted(set(spec) - {"must", "filter", "should", "must_not", "minimum_should_match", "boost"})
    if unknown:
        raise BadRequest(f"[bool] does not support [{', '.join(unknown)}]")

    def clauses(name: str) -> list[Matcher]:
        value = spec.get(name, [])
        return [_compile(q, depth + 1) for q in (value if isinstance(value, list) else [value])]
    must = clauses("must") + clauses("filter")
    should, must_not = clauses("should"), clauses("must_not")
    minimum = spec.get("minimum_should_match", 0 if must else 1)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
        raise BadRequest("[minimum_should_match] takes a count in a stop-word index")
    if not should:
        minimum = 0

    def matches(doc: Document) -> bool:
        return (all(m(doc) for m in must) and not any(m(doc) for m in must_not)
                and sum(1 for m in should if m(doc)) >= minimum)
    return matches


# --- query_string ----------------------------------------------------------------------

_TOKEN = re.compile(r'\s+|(\(|\)|&&|\|\||!|"(?:[^"\\]|\\.)*"|[+-](?=\S)|(?:[^\s()"\\:]|\\.)+:|'
                    r'(?:[^\s()"\\^]|\\.)+)(\^[0-9.]+)?')


def _query_string(spec: Any) -> Matcher:
    if not isinstance(spec, dict) or not isinstance(spec.get("query"), str):
        raise BadRequest("[query_string] needs a [query] string")
    unknown = sorted(set(spec) - {"query", "default_field", "fields", "default_operator", "boost"})
    if unknown:
        raise BadRequest(f"[query_string] does not support [{', '.join(unknown)}] in a stop-word index")
    fields = spec.get("fields") or [spec.get("default_field", ALL_FIELDS)]
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise BadRequest("[query_string] fields must be a list of field names")
    operator = str(spec.get("default_operator", "OR")).upper()
    if operator not in ("OR", "AND"):
        raise BadRequest("[query_string] default_operator is OR or AND")
    tokens = _tokens(spec["query"])
    parser = _QueryStringParser(tokens, tuple(fields), operator == "AND")
    matcher = parser.expression()
    if parser.pos != len(tokens):
        raise BadRequest(f"[query_string] cannot parse [{spec['query']}]: unexpected [{tokens[parser.pos]}]")
    return matcher


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise BadRequest(f"[query_string] cannot parse [{text}] at [{text[pos:]}]")
        if found.group(1):
            tokens.append(found.group(1))
        pos = found.end()
    return tokens


class _QueryStringParser:
    """Lucene's classic syntax, the part stop words need: clauses joined by AND / OR (the
    default operator between bare neighbours), NOT and -, +, parentheses."""

    def __init__(self, tokens: list[str], fields: tuple[str, ...], every: bool) -> None:
        self.tokens, self.pos, self.fields, self.every = tokens, 0, fields, every

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expression(self, depth: int = 0) -> Matcher:
        if depth > MAX_QUERY_DEPTH:
            raise BadRequest("[query_string] is nested too deeply")
        required: list[Matcher] = []
        optional: list[Matcher] = []
        excluded: list[Matcher] = []
        pending_and = False
        while (token := self.peek()) is not None and token != ")":
            if token in ("AND", "&&"):
                self.pos += 1
                pending_and = True
                continue
            if token in ("OR", "||"):
                self.pos += 1
                continue
            negate = token in ("NOT", "!", "-")
            must = token == "+"
            if negate or must:
                self.pos += 1
            clause = self.clause(depth)
            if negate:
                excluded.append(clause)
            elif must or pending_and or self.every or (self.peek() in ("AND", "&&")):
                if pending_and and optional and not self.every:
                    required.append(optional.pop())  # a AND b: a is required too
                required.append(clause)
            else:
                optional.append(clause)
            pending_and = False
        if pending_and:
            raise BadRequest("[query_string] ends where a term was expected")
        if not (required or optional or excluded):
            raise BadRequest("[query_string] has an empty clause")

        def matches(doc: Document) -> bool:
            if any(m(doc) for m in excluded) or not all(m(doc) for m in required):
                return False
            return bool(required) or any(m(doc) for m in optional) or (not optional and bool(excluded))
        return matches

    def clause(self, depth: int) -> Matcher:
        token = self.peek()
        if token is None:
            raise BadRequest("[query_string] ends where a term was expected")
        self.pos += 1
        fields = self.fields
        if token.endswith(":") and len(token) > 1:
            fields = (_unescape(token[:-1]),)
            token = self.peek()
            if token is None:
                raise BadRequest("[query_string] has a field without a term")
            self.pos += 1
        if token == "(":
            outer, self.fields = self.fields, fields  # field:(a b): the group's terms are on the field
            inner = self.expression(depth + 1)
            self.fields = outer
            if self.peek() != ")":
                raise BadRequest("[query_string] has an unclosed (")
            self.pos += 1
            return inner
        if token in (")", "AND", "OR", "&&", "||"):
            raise BadRequest(f"[query_string] has [{token}] where a term was expected")
        return _any_field(fields, token)


def _any_field(fields: tuple[str, ...], token: str) -> Matcher:
    if token.startswith('"'):
        words = analyze(_unescape(token[1:-1]))
        matchers = [_phrase(field, words) for field in fields]
    elif token == "*":
        return lambda doc: any(_words(doc, field) for field in fields)
    elif any(c in token for c in "*?") and not token.startswith("\\"):
        pattern = token.lower()
        matchers = [_wildcard(field, pattern) for field in fields]
    else:
        words = analyze(_unescape(token))
        matchers = [_words_query(field, words, False) for field in fields]
    return lambda doc: any(m(doc) for m in matchers)


def _wildcard(field: str, pattern: str) -> Matcher:
    return lambda doc: any(fnmatch.fnmatchcase(word, pattern) for word in _words(doc, field))


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)
