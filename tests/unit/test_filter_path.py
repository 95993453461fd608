"""``filter_path`` as OpenSearch applies it, pure: tables of (expression, body, expected)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import BadRequest
from mlstream.wire.filterpath import MAX_PATHS, parse_filter_path

SEARCH = {"took": 1, "timed_out": False,
          "hits": {"total": {"value": 2, "relation": "eq"},
                   "hits": [{"_id": "a", "_source": {"name": "one", "model_state": "DEPLOYED"}},
                            {"_id": "b", "_source": {"name": "two"}}]}}
NESTED = {"persistent": {"plugins": {"ml_commons": {"stream_enabled": True, "only_run_on_ml_node": False}}},
          "transient": {}}


@pytest.mark.parametrize("expression, body, expected", [
    ("took", SEARCH, {"took": 1}),
    ("hits.total.value", SEARCH, {"hits": {"total": {"value": 2}}}),
    ("hits.hits._id", SEARCH, {"hits": {"hits": [{"_id": "a"}, {"_id": "b"}]}}),   # through arrays
    ("hits.hits._source.model_state", SEARCH, {"hits": {"hits": [{"_source": {"model_state": "DEPLOYED"}}]}}),
    ("took,timed_out", SEARCH, {"took": 1, "timed_out": False}),
    (" took , timed_out ", SEARCH, {"took": 1, "timed_out": False}),
    ("t*", SEARCH, {"took": 1, "timed_out": False}),
    ("*out", SEARCH, {"timed_out": False}),
    ("hits.*.value", SEARCH, {"hits": {"total": {"value": 2}}}),
    ("**.name", SEARCH, {"hits": {"hits": [{"_source": {"name": "one"}}, {"_source": {"name": "two"}}]}}),
    ("**.stream_enabled", NESTED, {"persistent": {"plugins": {"ml_commons": {"stream_enabled": True}}}}),
    ("persistent.**", NESTED, {"persistent": NESTED["persistent"]}),
    ("nothing", SEARCH, {}),                                      # nothing matches: an empty object
    ("took.deeper", SEARCH, {}),                                  # a path past a leaf includes nothing
    ("transient", NESTED, {"transient": {}}),                     # an empty object that matched stays
    ("-took", SEARCH, {"timed_out": False, "hits": SEARCH["hits"]}),
    ("-hits.hits._source", SEARCH,
     {"took": 1, "timed_out": False, "hits": {"total": SEARCH["hits"]["total"], "hits": [{"_id": "a"}, {"_id": "b"}]}}),
    ("-hits.total.*", SEARCH, {"took": 1, "timed_out": False, "hits": {"total": {}, "hits": SEARCH["hits"]["hits"]}}),
    ("-**.name", SEARCH, {**SEARCH, "hits": {"total": SEARCH["hits"]["total"],
                                             "hits": [{"_id": "a", "_source": {"model_state": "DEPLOYED"}},
                                                      {"_id": "b", "_source": {}}]}}),
    ("hits.hits,-hits.hits._source", SEARCH, {"hits": {"hits": [{"_id": "a"}, {"_id": "b"}]}}),  # excludes first
    ("", SEARCH, SEARCH),
    ("a.b", {"a": [1, {"b": 2}, [{"b": 3}]]}, {"a": [{"b": 2}, [{"b": 3}]]}),
    ("a", [{"a": 1}, {"b": 2}], [{"a": 1}]),
], ids=["field", "nested", "array", "array-some", "two", "spaces", "prefix-star", "suffix-star", "star-segment",
        "any-levels", "any-levels-deep", "trailing-any-levels", "no-match", "past-leaf", "empty-kept", "exclude",
        "exclude-nested", "exclude-star", "exclude-any-levels", "both", "empty-expression", "mixed-array",
        "top-array"])
def test_filter_path(expression: str, body, expected) -> None:
    assert parse_filter_path(expression).apply(body) == expected


def test_the_input_is_not_changed() -> None:
    body = {"a": {"b": 1, "c": 2}}
    parse_filter_path("-a.b").apply(body)
    parse_filter_path("a.c").apply(body)
    assert body == {"a": {"b": 1, "c": 2}}


def test_a_scalar_body_is_kept() -> None:
    assert parse_filter_path("a").apply("text") == "text"


@pytest.mark.parametrize("expression", ["a..b", "-", ".a", ",".join(["x"] * (MAX_PATHS + 1)), ".".join(["x"] * 65)],
                         ids=["empty-segment", "bare-minus", "leading-dot", "too-many-paths", "too-deep"])
def test_invalid_expressions(expression: str) -> None:
    with pytest.raises(BadRequest):
        parse_filter_path(expression)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abc"), children,
                                                                                    max_size=3),
                    max_leaves=20)
PATHS = st.lists(st.lists(st.sampled_from(["a", "b", "c", "*", "**", "a*"]), min_size=1, max_size=3),
                 min_size=1, max_size=3)


@given(JSON, PATHS)
def test_including_everything_a_filter_includes_again_changes_nothing(body, paths) -> None:
    selection = parse_filter_path(",".join(".".join(path) for path in paths))
    once = selection.apply(body)
    assert selection.apply(once) == once


@given(JSON, PATHS)
def test_an_exclusion_removes_what_the_same_inclusion_keeps(body, paths) -> None:
    expression = ",".join(".".join(path) for path in paths)
    excluded = parse_filter_path(",".join("-" + p for p in expression.split(","))).apply(body)
    if isinstance(body, (dict, list)):
        assert parse_filter_path(expression).apply(excluded) == {}


@pytest.mark.parametrize("segment, key, matches", [
    ("*", "anything", True), ("*", "", True), ("a*", "abc", True), ("*c", "abc", True),
    ("a*c", "abc", True), ("a*c", "ac", True), ("a*c", "ab", False), ("a*b*c", "aXbYc", True),
    ("a*b*c", "acb", False), ("ab*ba", "aba", False), ("*a*a*", "aa", True), ("*a*a*", "a", False),
    ("x*", "abc", False), ("**", "abc", True),
])
def test_wildcard_segments(segment: str, key: str, matches: bool) -> None:
    from mlstream.wire.filterpath import _segment_matches

    assert _segment_matches(segment, key) is matches


def test_a_segment_of_many_wildcards_is_matched_without_backtracking() -> None:
    """`*a*a*...*b` against a long run of `a`s: a regex of `.*` would take seconds
    (exponential backtracking); ordered substring search answers at once."""
    body = {"a" * 4000: 1, "keep": 2}
    assert parse_filter_path("*a" * 40 + "*b").apply(body) == {}
