"""Checks of the arguments a whitelisted method is given: each raises the ``Fault`` (Java
exception) Java's method would.
"""

from __future__ import annotations

from typing import Any

from .operators import Fault
from .values import (
    JArray,
    JStringBuilder,
    type_name,
)

__all__ = ["check_bounds", "int_argument", "map_key", "need", "npe", "text_argument"]


def map_key(key: Any) -> Any:
    """A value usable as a Map key here: Lists and Maps are not (their Java hash follows
    their contents, which this interpreter does not track)."""
    if type(key) in (list, dict, JArray):
        raise Fault("IllegalArgumentException", f"a [{type_name(key)}] cannot be a Map key in a script")
    return key


def npe(what: str) -> Fault:
    return Fault("NullPointerException", what)


def need(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or type(value) is bool and kind is not bool:
        if value is None:
            raise npe(f"{what} is null")
        raise Fault("ClassCastException", f"{what} must be {_kind_name(kind)}, not [{type_name(value)}]")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a String", int: "an int", list: "a List", dict: "a Map"}
    return names.get(kind, "a number") if isinstance(kind, type) else "a number"


def int_argument(value: Any, what: str = "index") -> int:
    if type(value) is not int:
        raise Fault("ClassCastException", f"{what} must be an int, not [{type_name(value)}]")
    return value


def text_argument(value: Any, what: str) -> str:
    """A CharSequence argument."""
    if type(value) is str:
        return value
    if type(value) is JStringBuilder:
        return value.text()
    if value is None:
        raise npe(f"{what} is null")
    raise Fault("ClassCastException", f"{what} must be a String, not [{type_name(value)}]")


def check_bounds(index: int, length: int, kind: str = "Index") -> None:
    if not 0 <= index < length:
        raise Fault(f"{'StringIndexOutOfBoundsException' if kind == 'String' else 'IndexOutOfBoundsException'}",
                    f"Index {index} out of bounds for length {length}")
