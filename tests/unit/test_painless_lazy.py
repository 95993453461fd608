"""Lists of doubles printed into a script's String are printed only when read (``ListPrint``),
and a post-process script's JSON takes them back without printing (``LazyText``): each
case here is checked against the general path, the whole String printed and read."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import ScriptError
from mlstream.painless import Limits, compile_script
from mlstream.painless.values import JFloat, ListPrint, double_to_string, java_string
from mlstream.processing import post_process_script

from ..support.fuzz import fuzz

EDGES = [0.0, -0.0, 1e-3, 0.0009999999999999998, -1e-3, 1e7, 9999999.999999998, -1e7, 1e-7, 123456789.0,
         5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1.0, -1.5, 0.1, 1 / 3, 100.0, 1e21, 1e-5]
NON_FINITE = [math.nan, math.inf, -math.inf]


def padded(values: list[float], size: int = 70) -> list[float]:
    """A List long enough to be printed lazily (``ListPrint.of``)."""
    return (values * (size // len(values) + 1))[:size]


def each(values: list[Any]) -> str:
    """List.toString number by number: the general path."""
    return "[" + ", ".join(map(java_string, values)) + "]"


def printed_whole(source: str, answer: Any) -> Any:
    """The general path: the script's String printed whole, then read as the tensors' JSON
    (a String read from params is never lazy)."""
    text = compile_script(source).run(answer if isinstance(answer, dict) else {"result": answer})
    return outcome(lambda: post_process_script("return params.t", {}, json.dumps({"t": text}).encode()))


def outcome(step: Any) -> Any:
    try:
        return step()
    except ScriptError as error:
        return ("error", error.reason)


def test_list_print_is_taken_for_long_lists_of_doubles_only() -> None:
    assert ListPrint.of(padded([0.5])) is not None
    assert ListPrint.of([0.5] * 10) is None                        # short: printed at once
    assert ListPrint.of(padded([0.5]) + [1]) is None               # an Integer prints as one
    assert ListPrint.of(padded([0.5]) + [JFloat.of(0.1)]) is None   # a Float prints fewer digits than it reads as
    assert ListPrint.of(padded([0.5]) + ["x"]) is None


@pytest.mark.parametrize("values", [padded(EDGES), padded(NON_FINITE + EDGES), padded([-0.0]), padded([5e-324])],
                         ids=["edges", "non-finite", "negative-zero", "subnormal"])
@pytest.mark.parametrize("source", [
    "def b = new StringBuilder(); b.append(params.v); return b.toString()",
    "def b = new StringBuilder('x'); b.append('[' + params.v + ']'); return b.toString()",
    "return 'v=' + params.v + ';'",
    "return 1 + 2 + ':' + params.v",
    "def b = new StringBuilder(); b.append(params.v); return b.toString() + b.length()",
    "def b = new StringBuilder(); b.append(params.v); return b.length() + ':' + b.toString()",
    "def b = new StringBuilder(); b.append('' + params.v); b.insert(0, 'a'); return b.toString()",
    "def s = '' + params.v; return s.substring(1, 20) + s.length()",
], ids=["append", "append-concat", "return-concat", "numbers-first", "length-after", "length-before", "insert",
        "string-methods"])
def test_a_lazy_print_reads_as_the_printed_text(source: str, values: list[float]) -> None:
    text = each(values)
    expected = {
        0: text, 1: "x[" + text + "]", 2: "v=" + text + ";", 3: "3:" + text, 4: text + str(len(text)),
        5: f"{len(text)}:{text}", 6: "a" + text, 7: text[1:20] + str(len(text)),
    }
    sources = test_a_lazy_print_reads_as_the_printed_text.pytestmark[0].args[1]
    assert compile_script(source).run({"v": values}) == expected[sources.index(source)]


CHANGES = ["params.v.set(0, 2.5)", "params.v.add(2.5)", "params.v.add(0, 2.5)", "params.v.addAll([2.5])",
           "params.v.remove(0)", "params.v.remove(0.25)", "params.v.clear()", "params.v[0] = 2.5",
           "params.v[0] += 1", "params.v[1]++", "params.other.add(1)"]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("kind", ["text", "tensors"])
def test_a_list_changed_after_it_was_printed_prints_as_it_was(change: str, kind: str) -> None:
    source = ("def b = new StringBuilder('{\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":'); "
              f"b.append(params.v); {change}; return b.append('}}').toString()")
    values = padded([0.25, 0.5])
    if kind == "text":
        text = compile_script(source).run({"v": values, "other": []})
        assert text.endswith(each(padded([0.25, 0.5])) + "}")
    else:
        tensors = post_process_script(source, {}, json.dumps({"v": values, "other": []}).encode())
        assert tensors[0]["data"] == padded([0.25, 0.5])


POST_SCRIPTS = [
    ("tensor-list", ("def b = new StringBuilder('['); b.append('{\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":' "
                     "+ params.v + '}'); return b.append(']').toString()")),
    ("tensor", "return '{\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":' + params.v + '}'"),
    ("nested", "return '{\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":[' + params.v + ']}'"),
    ("in-a-string", "return '{\"name\":\"e\",\"result\":\"' + params.v + '\"}'"),
    ("escaped-quote", "return '{\"name\":\"e\",\"result\":\"\\\\' + params.v + '\"}'"),
    ("as-a-key", "return '{' + params.v + ':1}'"),
    ("after-a-number", "return '{\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":1' + params.v + '}'"),
    ("alone", "return '' + params.v"),
    ("text", "return 'vector: ' + params.v"),
    ("leading-space", "return '  {\"name\":\"e\",\"data_type\":\"FLOAT32\",\"data\":' + params.v + '}  '"),
    ("twice", ("return '[{\"name\":\"a\",\"data_type\":\"FLOAT32\",\"data\":' + params.v + '},"
               "{\"name\":\"b\",\"data_type\":\"FLOAT32\",\"data\":' + params.v + '}]'")),
]


@pytest.mark.parametrize("values", [padded(EDGES), padded(NON_FINITE + EDGES)], ids=["edges", "non-finite"])
@pytest.mark.parametrize("source", [c[1] for c in POST_SCRIPTS], ids=[c[0] for c in POST_SCRIPTS])
def test_post_process_reads_lazy_prints_as_the_printed_text(source: str, values: list[float]) -> None:
    payload = json.dumps({"v": values}).encode()
    lazy = outcome(lambda: post_process_script(source, {}, payload))
    assert repr(lazy) == repr(printed_whole(source, {"v": values}))   # repr: NaN equals itself


@pytest.mark.parametrize("kind", ["builder", "concat"])
def test_budgets_stop_exactly_where_the_printed_text_would(kind: str) -> None:
    values = padded([0.5, -0.25])           # 70 numbers of 3-5 characters: far below their most (26)
    size = len(each(values))
    source = ("def b = new StringBuilder(); b.append(params.v); return b.toString()" if kind == "builder"
              else "return '' + params.v")
    script = compile_script(source)
    # the String (and the Builder) may be exactly as long as the text, not a character less
    assert script.run({"v": values}, Limits(max_string_chars=size)) == each(values)
    with pytest.raises(ScriptError, match="max_string_chars"):
        script.run({"v": values}, Limits(max_string_chars=size - 1))
    # charged as when printed: the List's text, then the String made of it (concat) or the
    # text appended and the Builder's toString (builder)
    spent = 3 * size if kind == "builder" else 2 * size
    assert script.run({"v": values}, Limits(max_allocated=spent)) == each(values)
    with pytest.raises(ScriptError, match="max_allocated"):
        script.run({"v": values}, Limits(max_allocated=spent - 1))


@pytest.mark.parametrize("source", ["return '' + params.v", "def b = new StringBuilder(); b.append(params.v)"])
def test_a_list_too_long_to_print_is_refused_as_when_printed(source: str) -> None:
    # two characters a number at least: 70 numbers cannot print within 100 characters
    with pytest.raises(ScriptError, match="would print a value longer than 100 characters"):
        compile_script(source).run({"v": padded([0.5])}, Limits(max_string_chars=100))


def test_a_growing_builder_of_lazy_prints_stops_at_its_limit() -> None:
    source = "def b = new StringBuilder(); while (true) { b.append(params.v) }"
    with pytest.raises(ScriptError, match="max_string_chars"):
        compile_script(source).run({"v": padded([0.5])}, Limits(max_string_chars=10_000))
    with pytest.raises(ScriptError, match="max_allocated"):
        compile_script(source).run({"v": padded([0.5])}, Limits(max_allocated=10_000))


DOUBLES = st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e-2, 1e-2) | st.sampled_from(EDGES) | \
    st.floats(min_value=1e6, max_value=1e8) | st.floats(min_value=-1e-300, max_value=1e-300)


@fuzz(200)
@given(st.lists(DOUBLES, min_size=64, max_size=120))
def test_a_lazy_print_equals_printing_each_double(values: list[float]) -> None:
    printed = ListPrint.of(values)
    assert printed is not None
    assert printed.text() == "[" + ", ".join(map(double_to_string, values)) + "]"
    assert len(printed.text()) <= printed.upper


@fuzz(200)
@given(st.lists(DOUBLES, min_size=64, max_size=120), st.sampled_from([c[1] for c in POST_SCRIPTS]))
def test_post_process_of_any_doubles_equals_the_printed_text(values: list[float], source: str) -> None:
    payload = json.dumps({"v": values}).encode()
    lazy = outcome(lambda: post_process_script(source, {}, payload))
    assert repr(lazy) == repr(printed_whole(source, {"v": values}))
