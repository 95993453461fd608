"""Java's operators over ``values``: numeric promotion, wrapping, ``+`` concatenation,
``==`` as ``equals``. Pure; raises ``Fault`` (a Java exception by name) on misuse."""

from __future__ import annotations

import math
from typing import Any

from .values import JFloat, JLong, java_string, type_name, wrap_int, wrap_long

__all__ = ["Fault", "binary", "equals", "is_number", "truthy"]

_NUMBERS = (int, JLong, JFloat, float)


class Fault(Exception):
    """A Java exception the script raised (``ArithmeticException``, ``ClassCastException``...)."""

    def __init__(self, java_type: str, message: str) -> None:
        super().__init__(f"{java_type}: {message}")
        self.java_type = java_type
        self.message = message


def is_number(value: Any) -> bool:
    return type(value) in _NUMBERS


def is_long(value: Any) -> bool:
    """A ``long``: a ``JLong``, or a plain int past 32 bits (a JSON number Jackson would
    read as a Long; an ``int`` result always wraps back into 32 bits)."""
    kind = type(value)
    return kind is JLong or (kind is int and not -2**31 <= value < 2**31)


def _kind(a: Any, b: Any, op: str) -> str:
    """Binary numeric promotion: "d" double, "f" float, "l" long, "i" int."""
    ta, tb = type(a), type(b)
    if ta not in _NUMBERS or tb not in _NUMBERS:
        raise Fault("ClassCastException", f"Cannot apply [{op}] to types [{type_name(a)}] and [{type_name(b)}]")
    if ta is float or tb is float:
        return "d"
    if ta is JFloat or tb is JFloat:
        return "f"
    if is_long(a) or is_long(b):
        return "l"
    return "i"


def _integral(kind: str, value: int) -> int:
    return wrap_int(value) if kind == "i" else wrap_long(value)


def _real(kind: str, value: float) -> float:
    return JFloat.of(value) if kind == "f" else value


def _div(kind: str, a: Any, b: Any) -> Any:
    if kind in "il":
        if b == 0:
            raise Fault("ArithmeticException", "/ by zero")
        q = abs(int(a)) // abs(int(b))
        return _integral(kind, q if (a < 0) == (b < 0) else -q)
    if b == 0:
        if a == 0 or math.isnan(a):
            return _real(kind, math.nan)
        return _real(kind, math.copysign(math.inf, a) * math.copysign(1.0, b))
    return _real(kind, float(a) / float(b))


def _rem(kind: str, a: Any, b: Any) -> Any:
    if kind in "il":
        if b == 0:
            raise Fault("ArithmeticException", "/ by zero")
        x, y = int(a), int(b)
        q = abs(x) // abs(y)
        return _integral(kind, x - (q if (x < 0) == (y < 0) else -q) * y)
    if b == 0 or math.isinf(a):
        return _real(kind, math.nan)
    return _real(kind, math.fmod(float(a), float(b)))


def _arith(op: str, a: Any, b: Any) -> Any:
    kind = _kind(a, b, op)
    if op == "/":
        return _div(kind, a, b)
    if op == "%":
        return _rem(kind, a, b)
    if kind in "il":
        x, y = int(a), int(b)
        value = x + y if op == "+" else x - y if op == "-" else x * y
        return _integral(kind, value)
    x, y = float(a), float(b)
    return _real(kind, x + y if op == "+" else x - y if op == "-" else x * y)


def _bits(op: str, a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is bool and tb is bool:
        return (a and b) if op == "&" else (a or b) if op == "|" else (a != b)
    if ta not in (int, JLong) or tb not in (int, JLong):
        raise Fault("ClassCastException", f"Cannot apply [{op}] to types [{type_name(a)}] and [{type_name(b)}]")
    kind = "l" if is_long(a) or is_long(b) else "i"
    x, y = int(a), int(b)
    return _integral(kind, x & y if op == "&" else x | y if op == "|" else x ^ y)


def _shift(op: str, a: Any, b: Any) -> Any:
    ta = type(a)
    if ta not in (int, JLong) or type(b) not in (int, JLong):
        raise Fault("ClassCastException", f"Cannot apply [{op}] to types [{type_name(a)}] and [{type_name(b)}]")
    width = 64 if is_long(a) else 32
    distance = int(b) & (width - 1)
    x = int(a)
    kind = "l" if width == 64 else "i"
    if op == "<<":
        return _integral(kind, x << distance)
    if op == ">>":
        return _integral(kind, x >> distance)
    return _integral(kind, (x % (1 << width)) >> distance)


def _compare(op: str, a: Any, b: Any) -> bool:
    _kind(a, b, op)
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def equals(a: Any, b: Any) -> bool:
    """Painless ``==``: ``equals`` for objects, numeric comparison across number types."""
    if a is None or b is None:
        return a is b
    ta, tb = type(a), type(b)
    if ta in _NUMBERS and tb in _NUMBERS:
        return a == b
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (str, list, dict) and tb in (str, list, dict):
        return ta is tb and _deep_equals(a, b)
    return a is b or (ta is tb and a == b and ta not in (list, dict))


def _deep_equals(a: Any, b: Any) -> bool:
    # List.equals / Map.equals compare elements with equals: Integer 1 is not Double 1.0
    if type(a) is list:
        return len(a) == len(b) and all(type(x) is type(y) and _deep_equals(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(type(a[k]) is type(b[k]) and _deep_equals(a[k], b[k]) for k in a)
    return a == b


def concat(a: Any, b: Any) -> str:
    return java_string(a) + java_string(b)


def binary(op: str, a: Any, b: Any) -> Any:
    """Every binary operator but ``&&``, ``||`` (they short-circuit) and ``+`` with a String."""
    if op in ("+", "-", "*", "/", "%"):
        return _arith(op, a, b)
    if op in ("==", "!="):
        same = equals(a, b)
        return same if op == "==" else not same
    if op in ("===", "!=="):
        same = (a is b) if type(a) in (list, dict) or type(b) in (list, dict) else equals(a, b)
        return same if op == "===" else not same
    if op in ("<", "<=", ">", ">="):
        return _compare(op, a, b)
    if op in ("&", "|", "^"):
        return _bits(op, a, b)
    return _shift(op, a, b)


def truthy(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise Fault("ClassCastException", f"Cannot cast [{type_name(value)}] to [boolean] in {where}")
    return value
