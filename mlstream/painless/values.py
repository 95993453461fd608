"""Java values as a Painless script sees them, and how Java prints them.

Pure. Mapping: ``null`` None, ``boolean`` bool, ``int`` int (32-bit, wraps), ``long``
``JLong`` (64-bit, wraps), ``double`` float, ``float`` ``JFloat``, ``String`` str,
``List`` list, ``Map`` dict, arrays ``JArray``, ``StringBuilder`` ``JStringBuilder``,
``BigDecimal`` ``decimal.Decimal``, a thrown exception ``JException``.

A Java String is a sequence of UTF-16 units; a Python str of code points. A character past
U+FFFF is one code point here and two units (a surrogate pair) in Java: ``utf16_units`` and
``from_units`` convert, for the methods that count or index (a str without such characters,
the common case, is its own units). A script that splits a pair holds a lone surrogate, a
code point U+D800..U+DFFF, as Java holds a lone ``char``; a method that joins units back
(``from_units``) makes a pair whole again.

A HashMap iterates in Java's bucket order (``hash_map_order``): the buckets of its table by
index, each in insertion order, which is a dict's order among the keys of one bucket.

Numbers print as ``Double.toString`` / ``Float.toString`` do (the shortest digits that read
back, JDK 19+), in scientific form outside [1e-3, 1e7): ``1.0E-4``, ``0.5``, ``1.2345678E7``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..speedups import dumps_json

__all__ = ["JArray", "JException", "JFloat", "JLong", "JStringBuilder", "LazyText", "ListPrint", "double_to_string",
           "float_to_string", "from_units", "hash_map_order", "java_hash", "java_string", "table_size", "type_name",
           "utf16_units", "wrap_int", "wrap_long"]


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
    """``parts`` are strings and ``ListPrint``s; ``known`` counts the characters (code
    points) of those already measured, ``lazy`` holds those not yet (measured when the
    length is read) and ``lazy_upper`` their most. ``wide`` counts the characters past
    U+FFFF among the parts (each one more UTF-16 unit than it is characters; a
    ``ListPrint`` has none)."""

    __slots__ = ("known", "lazy", "lazy_upper", "parts", "wide")

    def __init__(self, text: str = "") -> None:
        self.parts: list[str | ListPrint] = [text] if text else []
        self.known = len(text)
        self.lazy: list[ListPrint] = []
        self.lazy_upper = 0
        self.wide = wide_count(text)

    def units(self) -> int:
        """``length()``: UTF-16 units."""
        return self.length + self.wide

    def reset(self, text: str) -> None:
        """The builder now holds ``text`` alone."""
        self.parts, self.length, self.wide = [text], len(text), wide_count(text)

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
        return from_units(_joined(self.parts))   # halves the script joined: one character


def _joined(parts: list[str | ListPrint]) -> str:
    return "".join([part if type(part) is str else part.text() for part in parts])


@dataclass(frozen=True, slots=True)
class JException:
    """An exception object a script made with ``new``; ``throw`` raises it."""

    type: str
    message: str | None


# ------------------------------------------------------------------ UTF-16

_WIDE = re.compile("[\U00010000-\U0010ffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def wide_count(text: str) -> int:
    """How many characters of ``text`` lie past U+FFFF (two UTF-16 units each)."""
    return 0 if text.isascii() else len(_WIDE.findall(text))


def utf16_length(text: str) -> int:
    """``String.length()``."""
    return len(text) if text.isascii() else len(text) + len(_WIDE.findall(text))


def _split_pair(match: re.Match[str]) -> str:
    offset = ord(match.group()) - 0x10000
    return chr(0xD800 + (offset >> 10)) + chr(0xDC00 + (offset & 0x3FF))


def utf16_units(text: str) -> str:
    """``text`` with each character past U+FFFF written as its two surrogates: one code
    point per UTF-16 unit, so that Python's indexes are Java's. ``text`` itself when it
    has no such character."""
    return text if text.isascii() else _WIDE.sub(_split_pair, text)


def from_units(units: str) -> str:
    """The string of UTF-16 ``units``: each high surrogate followed by a low one becomes
    the character they encode; a lone surrogate stays (Java keeps it as it is)."""
    if units.isascii() or not _SURROGATE.search(units):
        return units
    return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


# ------------------------------------------------------------------ hashCode, HashMap order

_MASK32 = 0xFFFFFFFF
_DOUBLE_BITS = struct.Struct(">d")
_LONG_BITS = struct.Struct(">Q")
_FLOAT_BITS = struct.Struct(">f")
_INT_BITS = struct.Struct(">I")


def _string_hash(text: str) -> int:
    """``String.hashCode``: over the UTF-16 units (a pair as its two surrogates)."""
    units = text.encode() if text.isascii() else text.encode("utf-16-be", "surrogatepass")
    step = 1 if text.isascii() else 2
    h = 0
    for position in range(0, len(units), step):
        unit = units[position] if step == 1 else units[position] << 8 | units[position + 1]
        h = (31 * h + unit) & _MASK32
    return h


def _long_hash(value: int) -> int:
    bits = value & 0xFFFFFFFFFFFFFFFF
    return (bits ^ (bits >> 32)) & _MASK32


def _decimal_hash(value: Decimal) -> int:
    # BigDecimal.hashCode: 31 * unscaledValue().hashCode() + scale(); BigInteger's hash
    # runs over the magnitude's 32-bit words, most significant first, times the sign
    sign, digits, exponent = value.as_tuple()
    magnitude = int("".join(map(str, digits)) or "0")
    h = 0
    for shift in range((magnitude.bit_length() + 31) // 32 * 32 - 32, -1, -32):
        h = (31 * h + (magnitude >> shift & _MASK32)) & _MASK32
    if sign:
        h = -h & _MASK32
    return (31 * h + int(-exponent)) & _MASK32


def java_hash(value: Any) -> int:
    """``hashCode()`` as an unsigned 32-bit number (Java's int, two's complement). Lists
    and Maps hash their contents; a StringBuilder, an array or an exception has Java's
    identity hash, which no run can foresee: here one fixed per object."""
    kind = type(value)
    if kind is str:
        return _string_hash(value)
    if kind is int:
        return value & _MASK32 if -_INT_BIAS <= value < _INT_BIAS else _long_hash(value)
    if kind is JLong:
        return _long_hash(value)
    if kind is float:
        bits = 0x7FF8000000000000 if math.isnan(value) else _LONG_BITS.unpack(_DOUBLE_BITS.pack(value))[0]
        return _long_hash(bits)
    if kind is bool:
        return 1231 if value else 1237
    if value is None:
        return 0
    if kind is JFloat:
        return 0x7FC00000 if math.isnan(value) else _INT_BITS.unpack(_FLOAT_BITS.pack(value))[0]
    if kind is list:
        h = 1
        for item in value:
            h = (31 * h + java_hash(item)) & _MASK32
        return h
    if kind is dict:
        return sum(java_hash(k) ^ java_hash(v) for k, v in value.items()) & _MASK32
    if kind is Decimal:
        return _decimal_hash(value)
    return id(value) & 0x7FFFFFFF


def table_size(size: int, table: int = 16) -> int:
    """The table a HashMap of ``table`` buckets has once it holds ``size`` entries: it
    doubles when an entry passes three quarters of it (``(int) (table * 0.75f)``)."""
    while size > table * 3 // 4:
        table *= 2
    return table


def hash_map_order(keys: Iterable[Any], table: int) -> list[Any]:
    """A HashMap's iteration order of ``keys`` (given in insertion order) in a table of
    ``table`` buckets: by bucket, ``(h ^ (h >>> 16)) & (table - 1)``, then insertion order
    (a resize splits each bucket in two keeping that order). Java turns a bucket of more
    than eight keys into a tree when the table has 64 buckets or more (and resizes a
    smaller table instead); only keys made to collide fill one bucket so, and their order
    here stays insertion order."""
    mask = table - 1

    def bucket(key: Any) -> int:
        h = java_hash(key)
        return (h ^ (h >> 16)) & mask
    return sorted(keys, key=bucket)


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


def default_map_keys(m: dict) -> list[Any]:
    """A HashMap's keys in its order, its table grown from 16 buckets by ``put`` alone."""
    return list(m) if len(m) < 2 else hash_map_order(m, table_size(len(m)))


def java_string(value: Any, map_keys: Callable[[dict], list[Any]] = default_map_keys) -> str:
    """``String.valueOf(value)``: what ``+`` and ``append`` make of a value. ``map_keys``
    gives a Map's keys in its iteration order."""
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
        return "[" + ", ".join([java_string(item, map_keys) for item in value]) + "]"
    if kind is dict:
        return "{" + ", ".join([f"{java_string(k, map_keys)}={java_string(value[k], map_keys)}"
                                for k in map_keys(value)]) + "}"
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
