"""Java values as a Painless script sees them, and how Java prints them.

Pure. Mapping: ``null`` None, ``boolean`` bool, ``int`` int (32-bit, wraps), ``long``
``JLong`` (64-bit, wraps), ``double`` float, ``float`` ``JFloat``, ``String`` str,
``List`` list, ``Map`` dict, arrays ``JArray``, ``StringBuilder`` ``JStringBuilder``,
``BigDecimal`` ``decimal.Decimal``, a thrown exception ``JException``.

Numbers print as ``Double.toString`` / ``Float.toString`` do (the shortest digits that read
back, JDK 19+), in scientific form outside [1e-3, 1e7): ``1.0E-4``, ``0.5``, ``1.2345678E7``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..speedups import dumps_json

__all__ = ["JArray", "JException", "JFloat", "JLong", "JStringBuilder", "LazyText", "ListPrint", "double_to_string",
           "float_to_string", "java_string", "type_name", "wrap_int", "wrap_long"]


class JLong(int):
    """A Java ``long``: a Python int that remembers it is 64-bit."""

    __slots__ = ()


class JFloat(float):
    """A Java ``float``: a double rounded to 32 bits."""

    __slots__ = ()

    @staticmethod
    def of(value: float) -> JFloat:
        try:
            return JFloat(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
        except OverflowError:
            return JFloat(math.copysign(math.inf, value))


class JArray(list):
    """A Java array: fixed length, ``.length``, elements of ``element`` type."""

    __slots__ = ("element",)

    def __init__(self, items: list[Any], element: str) -> None:
        super().__init__(items)
        self.element = element


class ListPrint:
    """``String.valueOf`` of a List of doubles, printed only when its text is read.

    A script that prints embedding vectors into the JSON it returns (the Titan blueprint's
    style) makes strings of 400k numbers; when they end up in the returned JSON untouched,
    the caller can take the numbers back without printing and reading them again
    (``LazyText``). ``values`` is the List itself until the script changes a List; then a
    copy (``Budget.list_written``), so that it prints as it was."""

    __slots__ = ("_text", "upper", "values")

    # at most "-2.2250738585072014E-308" (24 characters; "-Infinity" 9) and ", " per number
    MAX_CHARS_PER_NUMBER = 26

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.upper = 2 + self.MAX_CHARS_PER_NUMBER * len(values)
        self._text: str | None = None

    @staticmethod
    def of(value: Any) -> ListPrint | None:
        """A deferred print of ``value`` when it is a long List of doubles (not Floats,
        which print with fewer digits than they read back as). Java's ``NaN`` and
        ``Infinity`` read back as themselves too (Python's json reads them)."""
        if type(value) is not list or len(value) < _LAZY_MIN_ITEMS or type(value[0]) is not float \
                or list(map(type, value)).count(float) != len(value):
            return None
        return ListPrint(value)

    def text(self) -> str:
        if self._text is None:
            self._text = _double_list_string(self.values)
        return self._text


_LAZY_MIN_ITEMS = 64


class JStringBuilder:
    """``parts`` are strings and ``ListPrint``s; ``known`` counts the characters of those
    already measured, ``lazy`` holds those not yet (measured when the length is read) and
    ``lazy_upper`` their most."""

    __slots__ = ("known", "lazy", "lazy_upper", "parts")

    def __init__(self, text: str = "") -> None:
        self.parts: list[str | ListPrint] = [text] if text else []
        self.known = len(text)
        self.lazy: list[ListPrint] = []
        self.lazy_upper = 0

    @property
    def length(self) -> int:
        if self.lazy:
            self.known += sum(len(item.text()) for item in self.lazy)
            self.lazy, self.lazy_upper = [], 0
        return self.known

    @length.setter
    def length(self, size: int) -> None:
        self.known = size
        self.lazy, self.lazy_upper = [], 0

    def add_lazy(self, items: list[ListPrint]) -> None:
        self.lazy.extend(items)
        self.lazy_upper += sum(item.upper for item in items)

    def text(self) -> str:
        if len(self.parts) > 1 or self.parts and type(self.parts[0]) is not str:
            text = _joined(self.parts)
            self.parts, self.length = [text], len(text)
        return self.parts[0] if self.parts else ""


class LazyText:
    """A script's String result made of strings and ``ListPrint``s, not yet joined."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[str | ListPrint]) -> None:
        self.parts = parts

    def text(self) -> str:
        return _joined(self.parts)


def _joined(parts: list[str | ListPrint]) -> str:
    return "".join([part if type(part) is str else part.text() for part in parts])


@dataclass(frozen=True, slots=True)
class JException:
    """An exception object a script made with ``new``; ``throw`` raises it."""

    type: str
    message: str | None


_INT_BIAS = 2**31
_LONG_BIAS = 2**63


def wrap_int(value: int) -> int:
    return value if -_INT_BIAS <= value < _INT_BIAS else ((value + _INT_BIAS) % 2**32) - _INT_BIAS


def wrap_long(value: int) -> JLong:
    if -_LONG_BIAS <= value < _LONG_BIAS:
        return JLong(value)
    return JLong(((value + _LONG_BIAS) % 2**64) - _LONG_BIAS)


def _scientific(text: str) -> str:
    """Java's computerized scientific form (``d.dddE±n``) of the number ``text`` (a repr,
    or ``%g`` output: ``1e-05``, ``0.000123``, ``12345678.0``, ``2e+07``), nonzero."""
    negative = text.startswith("-")
    body = text.lstrip("-")
    if "e" in body:
        mantissa, exponent = body.split("e")
        digits, power = mantissa.replace(".", ""), int(exponent)   # one digit before the point
    else:
        whole, _, fraction = body.partition(".")
        whole = whole.lstrip("0")
        if whole:
            digits, power = whole + fraction, len(whole) - 1
        else:
            significant = fraction.lstrip("0")
            digits, power = significant, len(significant) - len(fraction) - 1
    digits = digits.rstrip("0") or "0"
    return ("-" if negative else "") + digits[0] + "." + (digits[1:] or "0") + f"E{power}"


def _java_form(text: str, value: float) -> str:
    """``text`` is Python's shortest repr of ``value`` (or a float32's shortest digits)."""
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if "e" not in text:
            return text if "." in text else text + ".0"
        return _plain(text)
    return _scientific(text)


def _plain(text: str) -> str:
    plain = format(Decimal(text), "f")
    return plain if "." in plain else plain + ".0"


def double_to_string(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return _java_form(repr(value), value)


_FLOAT32 = struct.Struct("f")


def float_to_string(value: float) -> str:
    """The fewest digits (``%.Ng``) that read back as the same float. Reading back is
    monotone in N when the float's rounding interval is symmetric, as it is for all but
    powers of two (whose lower neighbour is half as far; the tests try each of those), so
    the search starts at seven digits (a float has 6 to 9; most need 7 or 8) and goes
    down while fewer still read back, else up: two tries for most floats."""
    if value != value or value in _INFINITIES or value == 0:
        return double_to_string(value)
    pack = _FLOAT32.pack
    packed = pack(value)
    text = format(value, ".7g")
    if pack(float(text)) == packed:
        for spec in _FEWER_DIGITS:
            fewer = format(value, spec)
            if pack(float(fewer)) != packed:
                break
            text = fewer
    else:
        text = format(value, ".8g")
        if pack(float(text)) != packed:
            text = format(value, ".9g")   # 9 digits always read back
    return _java_form(text, value)


_INFINITIES = (math.inf, -math.inf)
_FEWER_DIGITS = tuple(f".{precision}g" for precision in range(6, 0, -1))


def _redo(token: str) -> str:
    return double_to_string(float(token))


def _double_list_string(values: list[float]) -> str:
    """``List<Double>.toString()``. The compact JSON of the list (orjson when installed)
    has Java's shortest digits; only the numbers below 1e-3 (``0.00095``, ``1e-7``: Java
    writes ``9.5E-4``, ``1.0E-7``) are printed again. A list with a non-finite number or
    one past 1e7 is printed number by number."""
    text = dumps_json(values).decode()
    if "N" in text or "I" in text or "n" in text or max(map(abs, values)) >= 1e7:
        return "[" + ", ".join(map(double_to_string, values)) + "]"
    if "e" in text:
        return "[" + ", ".join([_redo(t) if "0.000" in t or "e" in t else t for t in text[1:-1].split(",")]) + "]"
    return _reprint_small(text).replace(",", ", ")


def _reprint_small(text: str) -> str:
    """``text`` with each number that starts ``0.000`` / ``-0.000`` in Java's form: a few
    per vector, found with ``str.find`` rather than by looking at every number."""
    parts: list[str] = []
    done = 0
    hit = text.find("0.000")
    while hit >= 0:
        start = hit - 1 if text[hit - 1] == "-" else hit
        end = text.find(",", hit)
        end = len(text) - 1 if end < 0 else end
        if text[start - 1] in ",[":   # a number's start, not the tail of 10.0005
            parts.append(text[done:start])
            parts.append(_redo(text[start:end]))
            done = end
        hit = text.find("0.000", end)
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def java_string(value: Any) -> str:
    """``String.valueOf(value)``: what ``+`` and ``append`` make of a value."""
    kind = type(value)
    if kind is str:
        return value
    if kind is float:
        return double_to_string(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is JLong:
        return str(int(value))
    if value is None:
        return "null"
    if kind is list:
        if value and set(map(type, value)) == {float}:
            return _double_list_string(value)
        return "[" + ", ".join(map(java_string, value)) + "]"
    if kind is dict:
        return "{" + ", ".join(f"{java_string(k)}={java_string(v)}" for k, v in value.items()) + "}"
    if kind is JFloat:
        return float_to_string(value)
    if kind is JStringBuilder:
        return value.text()
    if kind is JArray:
        return f"[{_ARRAY_CODES.get(value.element, 'Ljava.lang.Object;')}@{id(value) & 0xffffff:x}"
    if kind is Decimal:
        return _big_decimal_string(value)
    if kind is JException:
        return f"java.lang.{value.type}" + (f": {value.message}" if value.message is not None else "")
    return str(value)


_ARRAY_CODES = {"int": "I", "long": "J", "double": "D", "float": "F", "boolean": "Z",
                "String": "Ljava.lang.String;"}


def _big_decimal_string(value: Decimal) -> str:
    # BigDecimal.toString: plain unless the exponent is positive or the number very small
    _, digits, exponent = value.as_tuple()
    adjusted = len(digits) - 1 + int(exponent)
    if int(exponent) <= 0 and adjusted >= -6:
        return format(value, "f")
    return format(value, "E").replace("E+", "E")


def type_name(value: Any) -> str:
    """The Java class name of a value, for error messages."""
    kind = type(value)
    if kind is int and not -2**31 <= value < 2**31:
        return "Long"
    return _TYPE_NAMES.get(kind, kind.__name__) if value is not None else "null"


_TYPE_NAMES = {str: "String", float: "Double", int: "Integer", JLong: "Long", JFloat: "Float",
               bool: "Boolean", list: "ArrayList", dict: "HashMap", JArray: "array",
               JStringBuilder: "StringBuilder", Decimal: "BigDecimal", JException: "Exception"}
