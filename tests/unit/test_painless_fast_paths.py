"""The interpreter's fast paths against its general ones: ``Float.toString`` by a guided
search against trying every digit count, and the arithmetic, comparison, ``++`` and method
call shortcuts against ``operators.binary`` and ``library.call_method``, and a number
appended to a StringBuilder against ``text_of`` then ``append_text``."""

from __future__ import annotations

import math
import re
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import ScriptError
from mlstream.painless import compile_script
from mlstream.painless.budget import Budget, BudgetExceeded, Limits
from mlstream.painless.library import call_method
from mlstream.painless.operators import Fault, binary
from mlstream.painless.semantics import append_value
from mlstream.painless.strings import append_text
from mlstream.painless.values import (
    JFloat,
    JLong,
    JStringBuilder,
    _java_form,
    float_to_string,
)

from ..support.fuzz import fuzz


def float_by_every_digit_count(value: float) -> str:
    """Float.toString the plain way: the first of 1..9 digits that reads back."""
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == value:
            break
    return _java_form(text, value)


FLOAT_EDGES = [1.0, 0.5, 2.0 ** -126, 2.0 ** -149, 2.0 ** 127, 3.4028234663852886e38, 1e-3, 0.0009999999, 1e7,
               9999999.0, 16777216.0, 0.1, 1 / 3, 123456.7, 1.17549421e-38, -0.2, 100.0, 1e-10, 2.0 ** 24 + 2]


@pytest.mark.parametrize("value", FLOAT_EDGES)
def test_float_to_string_edges(value: float) -> None:
    f = JFloat.of(value)
    assert float_to_string(f) == float_by_every_digit_count(f)
    assert float_to_string(JFloat(-f)) == float_by_every_digit_count(JFloat(-f))


def test_float_to_string_of_every_power_of_two() -> None:
    for exponent in range(-149, 128):
        f = JFloat.of(math.ldexp(1.0, exponent))
        assert float_to_string(f) == float_by_every_digit_count(f), exponent


@fuzz(500)
@given(st.integers(0, 2 ** 32 - 1))
def test_float_to_string_of_any_float(bits: int) -> None:
    value = struct.unpack("f", struct.pack("I", bits))[0]
    if math.isfinite(value) and value != 0:
        assert float_to_string(JFloat(value)) == float_by_every_digit_count(value)


NUMBERS = [0, 1, -1, 7, 2 ** 31 - 1, -2 ** 31, 2 ** 31, 2 ** 40, -2 ** 63, JLong(5), JLong(2 ** 62), 0.0, -0.0, 1.5,
           -2.25, math.inf, -math.inf, math.nan, 1e308, 5e-324, JFloat.of(0.1), True, "x", None]


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "-", "*"])
def test_arithmetic_and_comparison_shortcuts(op: str) -> None:
    script = compile_script(f"params.out = params.a {op} params.b; return null")
    for a in NUMBERS:
        for b in NUMBERS:
            params = {"a": a, "b": b}
            assert repr(outcome(lambda: result(script, params))) == \
                repr(outcome(lambda: binary(op, params["a"], params["b"]))), (a, op, b)   # noqa: B023 (run at once)


@fuzz(500)
@given(st.sampled_from(["<", "<=", ">", ">=", "-", "*"]),
       st.integers(-2 ** 33, 2 ** 33) | st.floats(), st.integers(-2 ** 33, 2 ** 33) | st.floats())
def test_arithmetic_and_comparison_shortcuts_on_any_numbers(op: str, a: Any, b: Any) -> None:
    script = compile_script(f"params.out = params.a {op} params.b; return null")
    assert repr(outcome(lambda: result(script, {"a": a, "b": b}))) == repr(outcome(lambda: binary(op, a, b)))


@pytest.mark.parametrize("declared, start, expected", [
    ("int", "2147483646", [2147483646, 2147483647, -2147483648]),   # wraps as an int does
    ("def", "2147483646", [2147483646, 2147483647, -2147483648]),
    ("long", "2147483646L", [2147483646, 2147483647, 2147483648]),
    ("double", "0.5", [0.5, 1.5, 2.5]),
    ("def", "params.big", [2 ** 40, 2 ** 40 + 1, 2 ** 40 + 2]),      # an int past 32 bits is a long
])
def test_increment_shortcut(declared: str, start: str, expected: list[Any]) -> None:
    source = f"{declared} i = {start}; def seen = []; for (int n = 0; n < 3; n++) {{ seen.add(i++); }} return seen"
    params: dict[str, Any] = {"big": 2 ** 40}
    compile_script(source.replace("return seen", "params.out = seen; return null")).run(params)
    seen = params["out"]
    assert seen == expected and [type(v) for v in seen] == [type(v) for v in expected] or \
        [int(v) for v in seen] == expected


@pytest.mark.parametrize("receiver, name, args", [
    ("abc", "length", []), ("abc", "substring", [1]), ([1, 2], "size", []), ({"a": 1}, "get", ["a"]),
    (1.5, "intValue", []), (0.1, "floatValue", []), ("a", "equals", ["a"]), (None, "length", []),
    (3, "length", []), ([1], "nope", []),
])
def test_method_call_shortcut(receiver: Any, name: str, args: list[Any]) -> None:
    script = compile_script(f"params.out = params.r.{name}({', '.join(f'params.a{i}' for i in range(len(args)))});"
                            " return null")
    params = {"r": receiver, **{f"a{i}": arg for i, arg in enumerate(args)}}
    general = outcome(lambda: call_method(Budget(Limits()), receiver, name, list(args)))
    ran = outcome(lambda: result(script, params))
    if isinstance(general, tuple):   # an error: the same Java exception
        assert isinstance(ran, tuple) and general[1] in ran[1]
    else:
        assert repr(ran) == repr(general)


def result(script: Any, params: dict[str, Any]) -> Any:
    """What the script stored in ``params.out`` (a script's own return value must be a String)."""
    script.run(params)
    return params["out"]


def outcome(step: Any) -> Any:
    try:
        return step()
    except (ScriptError, Fault) as error:   # the script's error message, or the operator's Java exception
        message = getattr(error, "reason", None) or str(error)
        return ("error", re.sub(r"^Painless runtime error at line \d+: ", "", message))


def _appended(append: Any, value: Any, limits: Limits, before: str) -> tuple[Any, ...]:
    budget = Budget(limits)
    sb = JStringBuilder(before)
    try:
        append(budget, sb, value)
        outcome: Any = "ok"
    except BudgetExceeded as spent:
        outcome = str(spent)
    return outcome, sb.text(), budget.allocated


@fuzz(500)
@given(st.one_of(st.integers(-2**31, 2**31 - 1), st.floats(allow_nan=True, allow_infinity=True),
                 st.floats(width=32).map(JFloat.of)),
       st.integers(0, 40), st.integers(0, 120), st.text("ab", max_size=20))
def test_a_number_appended_is_checked_and_charged_as_text_of_then_append_text(
        value: Any, max_string_chars: int, max_allocated: int, before: str) -> None:
    # runtime.append_value's number path (library.append_printed) against the general one
    limits = Limits(max_string_chars=max_string_chars, max_allocated=max_allocated)
    fast = _appended(append_value, value, limits, before)
    general = _appended(lambda b, sb, v: append_text(b, sb, b.text_of(v)), value, limits, before)
    assert fast == general
