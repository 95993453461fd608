"""Response-filter JSONPath: tables of (expression, document, expected)."""

from __future__ import annotations

from typing import Any

import pytest

from mlstream.errors import BadRequest
from mlstream.wire.jsonpath import JsonPath, JsonPathError, PathNotFound, compile_path

OPENAI = {
    "id": "chatcmpl-1",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hello"}},
        {"index": 1, "message": {"role": "assistant", "content": "Hi"}},
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
}
BEDROCK = {
    "output": {"message": {"role": "assistant", "content": [{"text": "Bonjour"}, {"text": "!"}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 3, "outputTokens": 4},
}
ODD = {
    "a-b": 1,
    "c_d": {"e": [10, 20, 30, 40]},
    "it's": "quote",
    'say "x"': "dq",
    "with.dot": "dot",
    "with space": "sp",
    "n": None,
    "s": "text",
    "nested": {"text": "deep", "list": [{"text": "deeper"}, [{"text": "deepest"}]]},
}

DEFINITE = [
    ("openai-content", "$.choices[0].message.content", OPENAI, "Hello"),
    ("bedrock-text", "$.output.message.content[0].text", BEDROCK, "Bonjour"),
    ("root", "$", {"a": 1}, {"a": 1}),
    ("object-value", "$.usage", OPENAI, {"prompt_tokens": 5, "completion_tokens": 2}),
    ("negative-index", "$.choices[-1].message.content", OPENAI, "Hi"),
    ("bracket-single-quotes", "$['choices'][1]['index']", OPENAI, 1),
    ("bracket-double-quotes", '$["output"]["message"]["role"]', BEDROCK, "assistant"),
    ("dash-name", "$.a-b", ODD, 1),
    ("underscore-name", "$.c_d.e[2]", ODD, 30),
    ("escaped-single-quote", r"$['it\'s']", ODD, "quote"),
    ("escaped-double-quote", r'$["say \"x\""]', ODD, "dq"),
    ("other-quote-inside", "$[\"it's\"]", ODD, "quote"),
    ("dot-in-bracket-name", "$['with.dot']", ODD, "dot"),
    ("space-in-bracket-name", "$['with space']", ODD, "sp"),
    ("null-value-is-found", "$.n", ODD, None),
    ("spaces-in-brackets", "$[ 'c_d' ][ 'e' ][ -4 ]", ODD, 10),
    ("surrounding-whitespace", "  $.s \n", ODD, "text"),
    ("root-array", "$[1]", ["a", "b"], "b"),
]


@pytest.mark.parametrize("expression, document, expected", [c[1:] for c in DEFINITE],
                         ids=[c[0] for c in DEFINITE])
def test_definite(expression: str, document: Any, expected: Any) -> None:
    path = compile_path(expression)
    assert path.is_definite
    assert path.read(document) == expected


INDEFINITE = [
    ("wildcard-bracket", "$.choices[*].message.content", OPENAI, ["Hello", "Hi"]),
    ("wildcard-dot-object", "$.usage.*", OPENAI, [5, 2]),
    ("wildcard-dot-list", "$.c_d.e.*", ODD, [10, 20, 30, 40]),
    ("wildcard-on-scalar", "$.s[*]", ODD, []),
    ("recursive-text", "$..text", BEDROCK, ["Bonjour", "!"]),
    ("recursive-pre-order", "$..text", ODD, ["deep", "deeper", "deepest"]),
    ("recursive-content", "$..content", OPENAI, ["Hello", "Hi"]),
    ("recursive-none", "$..missing", OPENAI, []),
    ("recursive-index", "$..[0]", {"a": [1, [2, 3]], "b": {"c": [4]}}, [1, 2, 4]),
    ("recursive-wildcard", "$..*", {"a": {"b": 1}, "c": [2]}, [{"b": 1}, [2], 1, 2]),
    ("recursive-bracket-name", "$..['text']", BEDROCK, ["Bonjour", "!"]),
    ("slice", "$.c_d.e[1:3]", ODD, [20, 30]),
    ("slice-open-start", "$.c_d.e[:2]", ODD, [10, 20]),
    ("slice-open-end", "$.c_d.e[2:]", ODD, [30, 40]),
    ("slice-negative", "$.c_d.e[-2:]", ODD, [30, 40]),
    ("slice-past-end", "$.c_d.e[3:99]", ODD, [40]),
    ("slice-on-object", "$.c_d[0:1]", ODD, []),
    ("union-names", "$['a-b','s']", ODD, [1, "text"]),
    ("union-names-missing-skipped", "$['a-b', 'nope', \"s\"]", ODD, [1, "text"]),
    ("union-indices", "$.c_d.e[0,-1]", ODD, [10, 40]),
    ("union-out-of-range-skipped", "$.c_d.e[0, 9]", ODD, [10]),
    ("missing-key-skipped", "$.items[*].x", {"items": [{"x": 1}, {"y": 2}, {"x": 3}]}, [1, 3]),
    ("key-on-non-dict-skipped", "$.items[*].x", {"items": [1, "s", [1], {"x": 2}]}, [2]),
    ("index-on-non-list-skipped", "$.items[*][0]", {"items": [{"0": 1}, [5], "str"]}, [5]),
]


@pytest.mark.parametrize("expression, document, expected", [c[1:] for c in INDEFINITE],
                         ids=[c[0] for c in INDEFINITE])
def test_indefinite(expression: str, document: Any, expected: list[Any]) -> None:
    path = compile_path(expression)
    assert not path.is_definite
    assert path.read(document) == expected


NOT_FOUND = [
    ("missing-key", "$.choices[0].message.nope", OPENAI),
    ("missing-top-key", "$.nope", OPENAI),
    ("index-out-of-range", "$.choices[2]", OPENAI),
    ("negative-out-of-range", "$.choices[-3]", OPENAI),
    ("index-into-object", "$.usage[0]", OPENAI),
    ("key-into-list", "$.choices.message", OPENAI),
    ("key-into-string", "$.id.length", OPENAI),
    ("index-into-string", "$.id[0]", OPENAI),
    ("key-into-null", "$.n.x", ODD),
    ("root-scalar", "$.a", "just a string"),
    ("string-key-is-not-index", "$['0']", ["zero"]),
]


@pytest.mark.parametrize("expression, document", [c[1:] for c in NOT_FOUND],
                         ids=[c[0] for c in NOT_FOUND])
def test_definite_path_not_found(expression: str, document: Any) -> None:
    path = compile_path(expression)
    with pytest.raises(PathNotFound, match="No value at"):
        path.read(document)


INVALID = [
    ("empty", ""),
    ("no-dollar", "choices[0]"),
    ("at-root", "@.a"),
    ("trailing-dot", "$.a."),
    ("triple-dot", "$...a"),
    ("double-dot-at-end", "$.."),
    ("unclosed-bracket", "$.a[0"),
    ("unclosed-quote", "$['a]"),
    ("escape-at-end", "$['a\\"),
    ("empty-brackets", "$[]"),
    ("not-a-number", "$[abc]"),
    ("lone-minus", "$[-]"),
    ("filter", "$.a[?(@.b == 1)]"),
    ("function", "$.a.length()"),
    ("slice-step", "$.a[0:4:2]"),
    ("mixed-union", "$['a', 0]"),
    ("union-trailing-comma", "$[0,]"),
    ("junk-after-root", "$a"),
    ("space-in-dot-name", "$.a b"),
    ("unclosed-after-name", "$['a'"),
]


@pytest.mark.parametrize("expression", [c[1] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_expression(expression: str) -> None:
    with pytest.raises(JsonPathError) as info:
        compile_path(expression)
    assert f"'{expression.strip()}'" in info.value.reason
    assert info.value.http_status == 400
    assert isinstance(info.value, BadRequest)


@pytest.mark.parametrize("expression", [None, 3, ["$.a"], {"p": "$"}],
                         ids=["none", "int", "list", "dict"])
def test_non_string_expression(expression: Any) -> None:
    with pytest.raises(JsonPathError, match="expected a string"):
        compile_path(expression)


def test_compile_is_cached_and_value_like() -> None:
    path = compile_path("$.choices[0].message.content")
    assert compile_path("$.choices[0].message.content") is path
    assert path == JsonPath("$.choices[0].message.content", True)
    assert "steps" not in repr(path)


def test_read_does_not_copy_or_mutate() -> None:
    document = {"a": {"b": [1]}}
    assert compile_path("$.a").read(document) is document["a"]
    compile_path("$..b").read(document)
    assert document == {"a": {"b": [1]}}


def test_path_not_found_is_lookup_error() -> None:
    with pytest.raises(LookupError):
        compile_path("$.x").read({})
