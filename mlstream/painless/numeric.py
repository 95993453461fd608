"""The whitelist's Number methods and its statics: ``Math``, ``Integer``, ``Long``,
``Double``, ``Float``, ``Boolean`` and ``String``'s, and their constant fields.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .arguments import need, text_argument
from .budget import Budget
from .operators import Fault, is_number
from .strings import compare_to, java_trim
from .values import (
    JFloat,
    JLong,
    double_to_string,
    float_to_string,
    java_string,
    type_name,
    wrap_int,
    wrap_long,
)

__all__ = ["DECIMAL_METHODS", "NUMBER_METHODS", "STATICS", "STATIC_FIELDS", "to_int", "to_long"]


# ------------------------------------------------------------------ Number

def to_int(value: Any) -> int:
    """``(int)`` of any number: doubles truncate and saturate, longs wrap."""
    if type(value) in (float, JFloat):
        if math.isnan(value):
            return 0
        return max(-2**31, min(2**31 - 1, int(value))) if not math.isinf(value) else (
            2**31 - 1 if value > 0 else -2**31)
    if type(value) is Decimal:
        return wrap_int(int(value))
    return wrap_int(int(value))


def to_long(value: Any) -> JLong:
    if type(value) in (float, JFloat):
        if math.isnan(value):
            return JLong(0)
        if math.isinf(value):
            return JLong(2**63 - 1 if value > 0 else -2**63)
        return JLong(max(-2**63, min(2**63 - 1, int(value))))
    return wrap_long(int(value))


NUMBER_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("intValue", 0): lambda b, n: to_int(n),
    ("longValue", 0): lambda b, n: to_long(n),
    ("doubleValue", 0): lambda b, n: float(n),
    ("floatValue", 0): lambda b, n: JFloat.of(float(n)),
    ("compareTo", 1): lambda b, n, o: compare_to(n, o),
    ("isNaN", 0): lambda b, n: math.isnan(n),
    ("isInfinite", 0): lambda b, n: type(n) in (float, JFloat) and math.isinf(n),
}
DECIMAL_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("intValue", 0): lambda b, n: to_int(n),
    ("longValue", 0): lambda b, n: to_long(n),
    ("doubleValue", 0): lambda b, n: float(n),
    ("floatValue", 0): lambda b, n: JFloat.of(float(n)),
    ("toPlainString", 0): lambda b, n: format(n, "f"),
}


# ------------------------------------------------------------------ statics

def _parse_int(text: Any, bits: int) -> int:
    s = text_argument(text, "the parsed text")
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise Fault("NumberFormatException", f'For input string: "{s}"')
    value = int(s)
    if not -2**(bits - 1) <= value < 2**(bits - 1):
        raise Fault("NumberFormatException", f'For input string: "{s}"')
    return value if bits == 32 else JLong(value)


_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")


def _parse_double(text: Any) -> float:
    s = java_trim(text_argument(text, "the parsed text"))
    if not _JAVA_DOUBLE.fullmatch(s):
        raise Fault("NumberFormatException", f'For input string: "{s}"')
    return float(s.rstrip("fFdD").replace("Infinity", "inf"))


def _math_minmax(pick: Callable[..., Any], a: Any, b: Any) -> Any:
    from .operators import binary
    binary("<", a, b)   # checks both are numbers
    if type(a) is float or type(b) is float:
        if math.isnan(a) or math.isnan(b):
            return math.nan
        return float(pick(a, b))
    if JFloat in (type(a), type(b)):
        return JFloat.of(pick(a, b))
    if JLong in (type(a), type(b)):
        return JLong(pick(a, b))
    return pick(a, b)


def _math_abs(a: Any) -> Any:
    if not is_number(a):
        raise Fault("ClassCastException", f"Math.abs needs a number, not [{type_name(a)}]")
    if type(a) is int:
        return wrap_int(abs(a))
    if type(a) is JLong:
        return wrap_long(abs(a))
    return type(a)(abs(a)) if type(a) is JFloat else abs(a)


def _math_round(a: Any) -> Any:
    if not is_number(a):
        raise Fault("ClassCastException", f"Math.round needs a number, not [{type_name(a)}]")
    if type(a) in (int, JLong):
        return JLong(a)
    if math.isnan(a):
        return 0 if type(a) is JFloat else JLong(0)
    value = math.floor(a + 0.5) if not math.isinf(a) else a
    return to_int(float(value)) if type(a) is JFloat else to_long(float(value))


def _real_fn(fn: Callable[[float], float]) -> Callable[..., float]:
    def apply(*args: Any) -> float:
        for arg in args:
            if not is_number(arg):
                raise Fault("ClassCastException", f"a Math function needs numbers, not [{type_name(arg)}]")
        try:
            return float(fn(*map(float, args)))
        except (ValueError, ZeroDivisionError):
            return math.nan
        except OverflowError:
            return math.inf
    return apply


def _join(budget: Budget, delimiter: Any, items: Any) -> str:
    sep = text_argument(delimiter, "the delimiter")
    parts = need(items, list, "the joined elements")
    return budget.string(sep.join(text_argument(p, "an element") if p is not None else "null" for p in parts))


def _log(x: float) -> float:
    if x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log(x)


STATICS: dict[tuple[str, str, int], Callable[..., Any]] = {
    ("Math", "min", 2): lambda b, x, y: _math_minmax(min, x, y),
    ("Math", "max", 2): lambda b, x, y: _math_minmax(max, x, y),
    ("Math", "abs", 1): lambda b, x: _math_abs(x),
    ("Math", "round", 1): lambda b, x: _math_round(x),
    ("Math", "floor", 1): lambda b, x: _real_fn(math.floor)(x),
    ("Math", "ceil", 1): lambda b, x: _real_fn(math.ceil)(x),
    ("Math", "sqrt", 1): lambda b, x: _real_fn(math.sqrt)(x),
    ("Math", "pow", 2): lambda b, x, y: _real_fn(math.pow)(x, y),
    ("Math", "exp", 1): lambda b, x: _real_fn(math.exp)(x),
    ("Math", "log", 1): lambda b, x: _real_fn(_log)(x),
    ("Math", "log10", 1): lambda b, x: _real_fn(lambda v: _log(v) / math.log(10))(x),
    ("Integer", "parseInt", 1): lambda b, s: _parse_int(s, 32),
    ("Integer", "valueOf", 1): lambda b, s: s if type(s) is int else _parse_int(s, 32),
    ("Integer", "toString", 1): lambda b, n: java_string(need(n, int, "the number")),
    ("Long", "parseLong", 1): lambda b, s: _parse_int(s, 64),
    ("Long", "valueOf", 1): lambda b, s: JLong(s) if type(s) in (int, JLong) else _parse_int(s, 64),
    ("Long", "toString", 1): lambda b, n: java_string(need(n, int, "the number")),
    ("Double", "parseDouble", 1): lambda b, s: _parse_double(s),
    ("Double", "valueOf", 1): lambda b, s: float(s) if is_number(s) else _parse_double(s),
    ("Double", "toString", 1): lambda b, n: double_to_string(float(need(n, (int, float), "the number"))),
    ("Double", "isNaN", 1): lambda b, n: is_number(n) and math.isnan(n),
    ("Float", "parseFloat", 1): lambda b, s: JFloat.of(_parse_double(s)),
    ("Float", "toString", 1): lambda b, n: float_to_string(JFloat.of(float(need(n, (int, float), "the number")))),
    ("Boolean", "parseBoolean", 1): lambda b, s: type(s) is str and s.lower() == "true",
    ("Boolean", "valueOf", 1): lambda b, s: s if type(s) is bool else (type(s) is str and s.lower() == "true"),
    ("Boolean", "toString", 1): lambda b, v: java_string(v),
    ("String", "valueOf", 1): lambda b, v: b.text_of(v),
    ("String", "join", 2): _join,
}

STATIC_FIELDS: dict[tuple[str, str], Any] = {
    ("Integer", "MAX_VALUE"): 2**31 - 1, ("Integer", "MIN_VALUE"): -2**31,
    ("Long", "MAX_VALUE"): JLong(2**63 - 1), ("Long", "MIN_VALUE"): JLong(-2**63),
    ("Double", "MAX_VALUE"): 1.7976931348623157e308, ("Double", "MIN_VALUE"): 5e-324,
    ("Double", "POSITIVE_INFINITY"): math.inf, ("Double", "NEGATIVE_INFINITY"): -math.inf,
    ("Double", "NaN"): math.nan, ("Math", "PI"): math.pi, ("Math", "E"): math.e,
}
