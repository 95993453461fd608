"""Hypothesis fuzzing of the Painless subset: whatever the text and whatever the params,
compiling either gives a script or a ``ScriptError``, and running one either returns
(a String or null) within its budget or raises a ``ScriptError`` — never another
exception, a hang or unbounded memory."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlstream.errors import ScriptError
from mlstream.painless import Limits, compile_script
from mlstream.painless.semantics import INTERNAL
from mlstream.painless.values import double_to_string, java_string
from mlstream.processing import post_process_script

FUZZ = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=300)
SMALL = Limits(max_steps=2_000, max_string_chars=10_000, max_allocated=50_000, max_call_depth=8)

# Fragments of the language: joined at random they make mostly-almost-valid scripts.
FRAGMENTS = [
    "def ", "int ", "String ", "double ", "long ", "List ", "Map ", "StringBuilder ", "def[] ", "x", "y", "i",
    "params", ".", "?.", "length", "size()", "text_docs", "[0]", "[", "]", "[:]", "(", ")", "{", "}", ";", ",",
    "=", "+=", "++", "--", "+", "-", "*", "/", "%", "<<", ">>>", "&", "|", "^", "&&", "||", "!", "~", "==",
    "!=", "===", "<", ">=", "?", ":", "?:", "if ", "else ", "for ", "while ", "do ", "return ", "break",
    "continue", "throw ", "new ", "instanceof ", "true", "false", "null", "0", "1", "2147483647", "1L", "0.5",
    "1e-4", "3f", "0x1F", "'a'", '"b\\""', "'\\\\'", "append(", "toString()", "substring(", "replace(",
    "indexOf(", "Math.max(", "Integer.parseInt(", "new ArrayList()", "new HashMap()", "new StringBuilder()",
    "new Double[2]", "new BigDecimal(", "escape(", "String f(def a) { return a; }", "// c\n", "/* c */",
    "\n", " ", "x = x + x", "while (true) {", "for (def v : params.v) {", "->", "::", "=~",
]


def _outcome(source: str, params: dict[str, Any]) -> None:
    try:
        script = compile_script(source)
    except ScriptError:
        return
    try:
        result = script.run(params, SMALL)
    except ScriptError as error:
        assert INTERNAL not in error.reason, (source, params)   # the safety net is not a feature
        return
    assert result is None or isinstance(result, str)


PARAMS = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(st.text(max_size=200))
def test_any_text(source: str) -> None:
    _outcome(source, {})


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.dictionaries(st.sampled_from(["v", "x", "text_docs"]),
                                                                         PARAMS, max_size=3))
def test_fragment_soup(fragments: list[str], params: dict[str, Any]) -> None:
    _outcome("".join(fragments), params)


EXPRESSIONS = st.sampled_from([
    "params.x", "params.v", "params.v[0]", "params.v.length", "params.x + params.y", "params.x * 2",
    "params.x / params.y", "params.x % params.y", "params.x == params.y", "params.x < params.y",
    "params.x << params.y", "-params.x", "(int) params.x", "(long) params.x", "(double) params.x",
    "(float) params.x", "params.x.toString()", "params.x.intValue()", "params.v.size()", "params.v.get(params.x)",
    "params.x ?: params.y", "params.x ? 1 : 2", "!params.x", "params.x.length()", "params.x.substring(params.y)",
    "params.x.replace(params.y, params.x)", "escape(params.x)", "String.valueOf(params.v)", "Math.max(params.x, params.y)",
    "Math.round(params.x)", "Integer.parseInt(params.x)", "Double.parseDouble(params.x)", "params.x.split(params.y)",
    "new BigDecimal(params.x)", "new StringBuilder(params.x)", "params.v.indexOf(params.x)", "params.x instanceof String",
    "params.v[params.x]", "params.m[params.x]", "params.m.keySet()", "String.join(params.x, params.v)",
])


@FUZZ
@given(EXPRESSIONS, st.fixed_dictionaries({"x": PARAMS, "y": PARAMS, "v": PARAMS, "m": PARAMS}))
def test_expressions_over_any_values(expression: str, params: dict[str, Any]) -> None:
    _outcome(f"def r = {expression}; return '' + r", params)


@FUZZ
@given(st.binary(max_size=300))
def test_post_process_any_answer(payload: bytes) -> None:
    try:
        post_process_script("return '' + params", {}, payload)
    except ScriptError:
        pass
    except Exception as error:  # the answer's own errors are ours too: not JSON, not an object
        assert type(error).__name__ in ("UpstreamError", "BadRequest"), error


@FUZZ
@given(PARAMS)
def test_json_answers_print(answer: Any) -> None:
    try:
        tensors = post_process_script("return 'v=' + params", {}, json.dumps(answer).encode())
    except Exception as error:
        assert type(error).__name__ == "BadRequest", error   # a scalar answer
        return
    assert tensors and tensors[0]["name"] == "response"


@FUZZ
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e-2, 1e-2), max_size=60))
def test_a_list_of_doubles_prints_as_each_double_does(values: list[float]) -> None:
    # the fast List<Double>.toString path must equal printing number by number
    assert java_string(values) == "[" + ", ".join(map(double_to_string, values)) + "]"
