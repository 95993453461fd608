"""Hypothesis fuzzing of the Painless subset: whatever the text and whatever the params,
compiling either gives a script or a ``ScriptError``, and running one either returns
(a String or null) within its budget or raises a ``ScriptError`` — never another
exception, a hang or unbounded memory."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import ScriptError
from mlstream.painless import compile_script
from mlstream.painless.semantics import INTERNAL
from mlstream.painless.values import double_to_string, java_string
from mlstream.processing import post_process_script

from ..support.fuzz import fuzz
from ..support.painless import EXPRESSIONS, FRAGMENTS, PARAMS, SMALL


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


@fuzz(300)
@given(st.text(max_size=200))
def test_any_text(source: str) -> None:
    _outcome(source, {})


@fuzz(300)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.dictionaries(st.sampled_from(["v", "x", "text_docs"]),
                                                                         PARAMS, max_size=3))
def test_fragment_soup(fragments: list[str], params: dict[str, Any]) -> None:
    _outcome("".join(fragments), params)


@fuzz(300)
@given(EXPRESSIONS, st.fixed_dictionaries({"x": PARAMS, "y": PARAMS, "v": PARAMS, "m": PARAMS}))
def test_expressions_over_any_values(expression: str, params: dict[str, Any]) -> None:
    _outcome(f"def r = {expression}; return '' + r", params)


@fuzz(300)
@given(st.binary(max_size=300))
def test_post_process_any_answer(payload: bytes) -> None:
    try:
        post_process_script("return '' + params", {}, payload)
    except ScriptError:
        pass
    except Exception as error:  # the answer's own errors are ours too: not JSON, not an object
        assert type(error).__name__ in ("UpstreamError", "BadRequest"), error


@fuzz(300)
@given(PARAMS)
def test_json_answers_print(answer: Any) -> None:
    try:
        tensors = post_process_script("return 'v=' + params", {}, json.dumps(answer).encode())
    except Exception as error:
        assert type(error).__name__ == "BadRequest", error   # a scalar answer
        return
    assert tensors and tensors[0]["name"] == "response"


@fuzz(300)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e-2, 1e-2), max_size=60))
def test_a_list_of_doubles_prints_as_each_double_does(values: list[float]) -> None:
    # the fast List<Double>.toString path must equal printing number by number
    assert java_string(values) == "[" + ", ".join(map(double_to_string, values)) + "]"
