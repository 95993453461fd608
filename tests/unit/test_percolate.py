"""The percolator of stop-word indices: the queries of ml-commons' guardrails tutorial and
RestMLGuardrailsIT against the texts a guardrail checks, and what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from mlstream.errors import BadRequest
from mlstream.guard.percolate import analyze, compile_query, document

from ..support.fuzz import fuzz

PAYLOAD = '{ "model": "gpt-3.5-turbo-instruct", "prompt": "%s",  "max_tokens": 7,  "temperature": 0 }'
STOP = PAYLOAD % "Say this is a test of stop word."
CLEAN = PAYLOAD % "Say this is a test"


def qs(query: str, **options: str) -> dict:
    return {"query_string": {"query": query, **options}}


@pytest.mark.parametrize("query, hits, misses", [
    # RestMLGuardrailsIT's STOP_WORDS_DATA
    (qs('title: "stop word"'), [STOP, "a Stop  Word"], [CLEAN, "word stop"]),
    (qs('title: "stop-word"'), [STOP, "stop-word"], [CLEAN]),
    (qs('title: "stop & word"'), [STOP], [CLEAN]),
    # the guardrails tutorial (docs.opensearch.org, ml-commons-plugin/remote-models/guardrails)
    (qs("title: blacklist"), ["put it on the Blacklist."], ["black list"]),
    (qs('title: "Master slave architecture"'), ["a master-slave architecture"], ["master and slave architecture"]),
    # the rest of the query_string subset
    (qs("stop AND word"), ["word then stop"], ["stop"]),
    (qs("stop OR nothing"), ["stop"], ["word"]),
    (qs("stop -word"), ["stop"], ["stop word"]),
    (qs("+stop +word"), ["word stop"], ["stop"]),
    (qs("NOT word"), ["stop"], ["word"]),
    (qs("title:sto*"), ["stopping"], ["top"]),
    (qs("title:st?p"), ["step"], ["steep"]),
    (qs("title:(stop OR halt)"), ["halt"], ["go"]),
    (qs("title:*"), ["anything"], [""]),
    (qs("other:stop"), [], ["stop"]),
    (qs("stop word", default_operator="AND"), ["word stop"], ["stop"]),
    (qs("stop^2"), ["stop"], ["go"]),
    ({"match": {"title": "stop word"}}, ["stop"], ["go"]),
    ({"match": {"title": {"query": "stop word", "operator": "and"}}}, ["word stop"], ["stop"]),
    ({"match_phrase": {"title": "stop word"}}, ["a stop word"], ["word stop"]),
    ({"term": {"title": "stop"}}, ["Stop"], ["stopping"]),
    ({"term": {"title": {"value": "Stop"}}}, [], ["Stop"]),  # terms are not analysed: no upper case is indexed
    ({"terms": {"title": ["stop", "halt"]}}, ["halt"], ["go"]),
    ({"bool": {"must": [{"match": {"title": "stop"}}], "must_not": [{"match": {"title": "bus"}}]}},
     ["stop"], ["bus stop"]),
    ({"bool": {"should": [{"match": {"title": "a1"}}, {"match": {"title": "b1"}}], "minimum_should_match": 2}},
     ["a1 b1"], ["a1"]),
    ({"match_all": {}}, ["x", ""], []),
])
def test_stored_query_against_the_checked_text(query, hits, misses):
    stored = compile_query(query)
    for text in hits:
        assert stored.matches(document({"title": text})), text
    for text in misses:
        assert not stored.matches(document({"title": text})), text


def test_analyzer_keeps_words_whole():
    assert analyze("Don't STOP u.s.a 3.14 stop-word foo_bar") == ["don't", "stop", "u.s.a", "3.14", "stop", "word",
                                                                "foo_bar"]


def test_default_field_is_every_field():
    stored = compile_query(qs('"stop word"'))
    assert stored.matches(document({"a": "go", "b": "stop word"}))


@pytest.mark.parametrize("query, words", [
    ({"range": {"n": {"gt": 1}}}, "[range] is not supported"),
    ({}, "exactly one query type"),
    (qs("a~2"), None),
    ({"match_phrase": {"title": {"query": "a b", "slop": 2}}}, "slop 0"),
    ({"match": {"title": {"query": "a", "fuzziness": 2}}}, "[fuzziness]"),
    ({"query_string": {"query": "a", "analyzer": "x"}}, "[analyzer]"),
    (qs("(a"), "unclosed"),
    (qs("a AND"), "ends where a term was expected"),
    (qs(")"), "empty clause"),
    (qs("a )"), "unexpected"),
    ({"bool": {"must": {"nope": {}}}}, "[nope] is not supported"),
    ({"bool": {"should": [], "minimum_should_match": "50%"}}, "a count"),
])
def test_unsupported_queries_are_refused(query, words):
    if words is None:  # fuzzy syntax is read as a word, not refused: it cannot crash either
        compile_query(query)
        return
    with pytest.raises(BadRequest) as refused:
        compile_query(query)
    assert words in refused.value.reason


@fuzz(300)
@given(st.text(alphabet='ab :"()*?+-!&|^\\', max_size=20), st.text(alphabet="ab :", max_size=12))
def test_any_query_string_compiles_or_is_a_400(query, text):
    try:
        stored = compile_query(qs(query))
    except BadRequest:
        return
    stored.matches(document({"title": text}))
