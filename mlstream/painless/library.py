"""The whitelist: every method, static, field and constructor a script may use, and the
casts between types. Anything not named here does not exist for a script (there is no
reflection to find it). Pure; each call that makes a string or grows a collection is
charged to the run's ``Budget``.

The methods of each type are tables in ``strings`` (String, StringBuilder), ``containers``
(List, Map) and ``numeric`` (Number, and the statics); this module is where a call
finds them, and holds the constructors and the casts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from .arguments import int_argument, need, npe, text_argument
from .budget import INSERTION_ORDER, Budget
from .containers import (
    LIST_METHODS,
    MAP_METHODS,
    list_get,
    list_set,
    map_put,
    presized_table,
)
from .numeric import (
    DECIMAL_METHODS,
    NUMBER_METHODS,
    STATIC_FIELDS,
    STATICS,
    to_int,
    to_long,
)
from .operators import Fault, equals, is_long, is_number
from .strings import BUILDER_METHODS, STRING_METHODS
from .values import (
    JArray,
    JException,
    JFloat,
    JLong,
    JStringBuilder,
    java_hash,
    type_name,
    wrap_int,
)

__all__ = [
    "call_method",
    "call_static",
    "cast",
    "coerce",
    "construct",
    "get_field",
    "new_array",
    "static_field",
]


_BOOLEAN: dict[tuple[str, int], Callable[..., Any]] = {("booleanValue", 0): lambda b, v: v}
_EXCEPTION: dict[tuple[str, int], Callable[..., Any]] = {("getMessage", 0): lambda b, e: e.message}

_METHODS: dict[type, dict[tuple[str, int], Callable[..., Any]]] = {
    str: STRING_METHODS, JStringBuilder: BUILDER_METHODS, list: LIST_METHODS, JArray: {}, dict: MAP_METHODS,
    int: NUMBER_METHODS, JLong: NUMBER_METHODS, float: NUMBER_METHODS, JFloat: NUMBER_METHODS,
    Decimal: DECIMAL_METHODS, bool: _BOOLEAN, JException: _EXCEPTION,
}
# Object's methods, on every receiver
_OBJECT: dict[tuple[str, int], Callable[..., Any]] = {
    ("toString", 0): lambda b, v: b.text_of(v),
    ("equals", 1): lambda b, v, o: equals(v, o),
    ("hashCode", 0): lambda b, v: wrap_int(java_hash(v)),
}


def methods_named(name: str, arity: int) -> dict[type, Callable[..., Any]]:
    """Each receiver type's method ``name/arity``, as ``call_method`` finds it (for a call
    site to look up by the receiver's type alone)."""
    found = {}
    for kind, table in _METHODS.items():
        method = table.get((name, arity)) or _OBJECT.get((name, arity))
        if method is not None:
            found[kind] = method
    return found


def call_method(budget: Budget, receiver: Any, name: str, args: list[Any]) -> Any:
    if receiver is None:
        raise npe(f"Cannot invoke [{name}] on a null value")
    table = _METHODS.get(type(receiver), {})
    method = table.get((name, len(args))) or _OBJECT.get((name, len(args)))
    if method is None:
        raise Fault("IllegalArgumentException",
                    f"dynamic method [{type_name(receiver)}, {name}/{len(args)}] not found")
    return method(budget, receiver, *args)


def get_field(receiver: Any, name: str) -> Any:
    """``x.name`` on a def value: Map keys, list/array ``length``, ``list.0``, getters."""
    kind = type(receiver)
    if kind is dict:
        return receiver.get(name)
    if kind is list or kind is JArray:
        if name == "length":
            return len(receiver)
        if name == "empty" and kind is list:
            return not receiver
        if name.isdigit():
            return list_get(receiver, int(name))
    elif kind is str and name == "empty":
        return not receiver
    if receiver is None:
        raise npe(f"Cannot access field [{name}] of a null value")
    raise Fault("IllegalArgumentException", f"dynamic getter [{type_name(receiver)}, {name}] not found")


def set_field(budget: Budget, receiver: Any, name: str, value: Any) -> None:
    if type(receiver) is dict:
        map_put(budget, receiver, name, value)
        return
    if type(receiver) is list and name.isdigit():
        list_set(receiver, int(name), value)
        return
    if receiver is None:
        raise npe(f"Cannot set field [{name}] of a null value")
    raise Fault("IllegalArgumentException", f"dynamic setter [{type_name(receiver)}, {name}] not found")


def has_static(type_: str, name: str, arity: int) -> bool:
    return (type_, name, arity) in STATICS


def has_static_field(type_: str, name: str) -> bool:
    return (type_, name) in STATIC_FIELDS


def call_static(budget: Budget, type_: str, name: str, args: list[Any]) -> Any:
    return STATICS[(type_, name, len(args))](budget, *args)


def static_field(type_: str, name: str) -> Any:
    return STATIC_FIELDS[(type_, name)]


# ------------------------------------------------------------------ constructors

EXCEPTIONS = frozenset({"Exception", "RuntimeException", "IllegalArgumentException", "IllegalStateException"})


def _big_decimal(value: Any) -> Decimal:
    if type(value) is str:
        if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value):
            raise Fault("NumberFormatException", f"Character array is not a valid decimal number: {value!r}")
        try:
            return Decimal(value)
        except InvalidOperation:  # pragma: no cover - the pattern admits only valid text
            raise Fault("NumberFormatException", value) from None
    if type(value) in (int, JLong, float, JFloat):
        if type(value) in (float, JFloat) and (math.isnan(value) or math.isinf(value)):
            raise Fault("NumberFormatException", "Infinite or NaN")
        return Decimal(value)
    raise Fault("ClassCastException", f"new BigDecimal needs a String or a number, not [{type_name(value)}]")


def _new_builder(budget: Budget, args: list[Any]) -> JStringBuilder:
    if not args or type(args[0]) is int:
        return JStringBuilder()
    return JStringBuilder(budget.string(text_argument(args[0], "the StringBuilder's text")))


def _new_list(budget: Budget, args: list[Any]) -> list:
    if not args or type(args[0]) is int:
        return []
    items = need(args[0], list, "the copied collection")
    budget.charge(len(items))
    return list(items)


def _new_map(budget: Budget, args: list[Any], *, linked: bool = False) -> dict:
    """``new HashMap()``, ``new HashMap(map)``, the same of ``LinkedHashMap``: a copy
    puts the entries in its source's order, in a table sized to them."""
    items = need(args[0], dict, "the copied map") if args else {}
    budget.charge(len(items))
    m = {key: items[key] for key in budget.map_keys(items)}
    table = INSERTION_ORDER if linked else presized_table(len(items)) if items else 16
    budget.note_map(m, table, made=True, allocated=bool(items))
    return m


_CONSTRUCTORS: dict[tuple[str, int], Callable[[Budget, list[Any]], Any]] = {
    ("StringBuilder", 0): _new_builder, ("StringBuilder", 1): _new_builder,
    ("ArrayList", 0): _new_list, ("ArrayList", 1): _new_list,
    ("HashMap", 0): _new_map, ("HashMap", 1): _new_map,
    ("LinkedHashMap", 0): lambda b, a: _new_map(b, a, linked=True),
    ("LinkedHashMap", 1): lambda b, a: _new_map(b, a, linked=True),
    ("BigDecimal", 1): lambda b, a: _big_decimal(a[0]),
    ("String", 0): lambda b, a: "",
    ("String", 1): lambda b, a: text_argument(a[0], "the copied text"),
}
for _name in EXCEPTIONS:
    _CONSTRUCTORS[(_name, 0)] = lambda b, a, _n=_name: JException(_n, None)
    _CONSTRUCTORS[(_name, 1)] = lambda b, a, _n=_name: JException(
        _n, None if a[0] is None else text_argument(a[0], "the exception's message"))


def has_constructor(type_: str, arity: int) -> bool:
    return (type_, arity) in _CONSTRUCTORS


def construct(budget: Budget, type_: str, args: list[Any]) -> Any:
    return _CONSTRUCTORS[(type_, len(args))](budget, args)


# ------------------------------------------------------------------ arrays and casts

_ARRAY_DEFAULTS = {"int": 0, "long": JLong(0), "short": 0, "byte": 0, "double": 0.0, "float": JFloat(0.0),
                   "boolean": False, "char": "\0"}


def new_array(budget: Budget, element: str, dims: int, sizes: list[Any]) -> JArray:
    size = int_argument(sizes[0], "an array size")
    if size < 0:
        raise Fault("NegativeArraySizeException", str(size))
    budget.charge(size)
    if len(sizes) > 1:
        return JArray([new_array(budget, element, dims - 1, sizes[1:]) for _ in range(size)],
                      element + "[]" * (dims - 1))
    default = _ARRAY_DEFAULTS.get(element) if dims == 1 else None
    return JArray([default] * size, element + "[]" * (dims - 1))


_INTEGRAL = {"int": 32, "short": 16, "byte": 8}


def coerce(value: Any, type_: str, dims: int = 0, where: str = "") -> Any:
    """Storing ``value`` where ``type_`` is declared: only widening happens implicitly."""
    if dims:
        if value is None or type(value) is JArray:
            return value
        return _cast_error(value, type_ + "[]" * dims, where)
    if type_ in ("def", "Object"):
        return value
    kind = type(value)
    if type_ == "String":
        return value if kind is str or value is None else _cast_error(value, type_, where)
    if type_ in ("int", "short", "byte", "Integer", "Short", "Byte"):
        if kind is int and -2**31 <= value < 2**31:
            return value
    elif type_ in ("long", "Long"):
        if kind is int or kind is JLong:
            return JLong(value)
    elif type_ in ("double", "Double"):
        if kind in (int, JLong, JFloat, float):
            return float(value)
    elif type_ in ("float", "Float"):
        if kind in (int, JLong, JFloat):
            return JFloat.of(float(value))
    elif type_ in ("boolean", "Boolean"):
        if kind is bool:
            return value
    elif type_ in ("char", "Character"):
        if kind is str and len(value) == 1:
            return value
    elif type_ == "Number":
        if is_number(value) or kind is Decimal:
            return value
    elif type_ in ("List", "ArrayList", "Collection"):
        if kind is list:
            return value
    elif type_ in ("Map", "HashMap", "LinkedHashMap"):
        if kind is dict:
            return value
    elif type_ == "StringBuilder":
        if kind is JStringBuilder:
            return value
    elif type_ == "CharSequence":
        if kind is str or kind is JStringBuilder:
            return value
    elif type_ == "BigDecimal":
        if kind is Decimal:
            return value
    elif type_ in EXCEPTIONS and kind is JException:
        return value
    if value is None and type_[0].isupper():
        return None
    return _cast_error(value, type_, where)


def _cast_error(value: Any, type_: str, where: str) -> Any:
    raise Fault("ClassCastException", f"Cannot cast [{type_name(value)}] to [{type_}]" + (f" {where}" if where else ""))


def cast(value: Any, type_: str, dims: int) -> Any:
    """An explicit ``(type) value``: numeric narrowing allowed."""
    if not dims and is_number(value):
        if type_ in _INTEGRAL:
            v = to_int(value)
            bits = _INTEGRAL[type_]
            return ((v + 2**(bits - 1)) % 2**bits) - 2**(bits - 1)
        if type_ == "long":
            return to_long(value)
        if type_ == "double":
            return float(value)
        if type_ == "float":
            return JFloat.of(float(value))
        if type_ == "char" and type(value) is int and 0 <= value < 0x10000:
            return chr(value)
    if not dims and type_ == "int" and type(value) is str and len(value) == 1:
        return ord(value)
    return coerce(value, type_, dims)


def is_instance(value: Any, type_: str, dims: int) -> bool:
    if value is None:
        return False
    try:
        coerce(value, type_, dims)
    except Fault:
        return False
    kind = type(value)
    if type_ in ("int", "Integer", "short", "byte", "Short", "Byte"):
        return kind is int and not is_long(value)
    if type_ in ("double", "Double"):
        return kind is float
    if type_ in ("long", "Long"):
        return is_long(value)
    if type_ in ("float", "Float"):
        return kind is JFloat
    return True
