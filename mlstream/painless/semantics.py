"""The operations of Painless both backends run: the closures (``runtime``) and the
translated Python (``pysource``) call these for everything but the common cases they
inline, so that the two compute, charge and fail alike.

Pure: each takes the run's ``Budget`` when it charges, and raises a ``Fault`` (a Java
exception), ``Thrown`` (a script's ``throw``) or ``BudgetExceeded``; ``script_error``
turns any of them into the ``ScriptError`` a caller sees.
"""

from __future__ import annotations

from typing import Any

from ..errors import ScriptError
from . import library
from .arguments import map_key
from .budget import Budget, BudgetExceeded
from .operators import Fault, binary
from .strings import append_parts, append_printed, append_text
from .syntax import TypeName
from .values import (
    JArray,
    JException,
    JFloat,
    JLong,
    JStringBuilder,
    LazyText,
    ListPrint,
    double_to_string,
    float_to_string,
    type_name,
    wrap_int,
    wrap_long,
)

__all__ = [
    "INTERNAL", "INT_LIMIT", "SCRIPT_FAILURES", "Concat", "Thrown", "append_concat", "append_value", "builder_text",
    "compound", "default_value", "index_get", "index_set", "iteration", "no_return", "plus",
    "script_error", "steps_spent", "throw", "too_deep", "unary",
]

INTERNAL = "an operation this interpreter does not support on these values"
INT_LIMIT = 2**31   # an int is 32 bits: -INT_LIMIT <= value < INT_LIMIT


class Thrown(Exception):
    """A script's ``throw``, carrying the exception it threw."""

    def __init__(self, exception: JException) -> None:
        super().__init__(exception.type)
        self.exception = exception


def script_error(error: Exception, line: int) -> ScriptError:
    if isinstance(error, Fault):
        return ScriptError(f"Painless runtime error at line {line}: {error}")
    if isinstance(error, Thrown):
        exc = error.exception
        return ScriptError(f"Painless runtime error at line {line}: {exc.type}"
                           + (f": {exc.message}" if exc.message is not None else ""))
    if isinstance(error, BudgetExceeded):
        return ScriptError(f"Painless script stopped at line {line}: {error}")
    if isinstance(error, RecursionError):
        return ScriptError(f"Painless script stopped at line {line}: nested too deeply")
    # A value combination the whitelist does not foresee: still the script's error,
    # never a traceback (the fuzz tests look for this message and fail on it).
    return ScriptError(f"Painless runtime error at line {line}: {INTERNAL} ({type(error).__name__})")


SCRIPT_FAILURES = (Fault, Thrown, BudgetExceeded, RecursionError, TypeError, ValueError, ArithmeticError,
                    LookupError)


class Concat:
    """A ``+`` chain run as ``plus`` runs it (the same values, charges and checks, left
    to right, each operand added as soon as it is computed), except that a long List of
    doubles added to a String is not printed (``ListPrint``). ``result()`` is (value,
    None, 0, []) when no List was left unprinted, else (None, the string's parts,
    characters of its strings, the ListPrints)."""

    __slots__ = ("budget", "known", "lazy", "parts", "value")

    def __init__(self, budget: Budget, first: Any) -> None:
        self.budget = budget
        self.value = first
        self.parts: list[Any] | None = None   # once the value so far is a String
        self.known = 0
        self.lazy: list[ListPrint] = []

    def add(self, item: Any) -> Concat:
        budget, parts = self.budget, self.parts
        if parts is None:
            value = self.value
            if type(value) is not str:
                self.value = plus(budget, value, item)
                return self
            parts = self.parts = [value]
            self.known = len(value)
        if type(item) is str:
            text = item
        else:
            printed = ListPrint.of(item)
            if printed is not None:
                budget.lazy_print(printed)     # String.valueOf(list), as text_of
                parts.append(printed)
                self.lazy.append(printed)
                budget.lazy_string(self.known, self.lazy)      # the string made so far, as plus
                return self
            text = budget.text_of(item)
        parts.append(text)
        self.known += len(text)
        budget.lazy_string(self.known, self.lazy)
        return self

    def result(self) -> tuple[Any, list | None, int, list]:
        if self.parts is None:
            return self.value, None, 0, []
        if not self.lazy:
            return "".join(self.parts), None, 0, []
        return None, self.parts, self.known, self.lazy


def append_concat(budget: Budget, receiver: Any, pieces: tuple[Any, list | None, int, list]) -> Any:
    """``receiver.append(a + b + ...)``, given the chain's ``Concat.result()``."""
    value, parts, known, lazy = pieces
    if type(receiver) is not JStringBuilder:
        return library.call_method(budget, receiver, "append", [value if parts is None else LazyText(parts).text()])
    if parts is not None:
        return append_parts(budget, receiver, parts, known, lazy)
    return append_text(budget, receiver, value if type(value) is str else budget.text_of(value))


def append_value(budget: Budget, receiver: Any, value: Any) -> Any:
    """``receiver.append(value)``: a List of doubles appended to a StringBuilder is left
    unprinted until the builder is read."""
    if type(receiver) is not JStringBuilder:
        return library.call_method(budget, receiver, "append", [value])
    kind = type(value)
    if kind is str:
        return append_text(budget, receiver, value)
    if kind is JFloat or kind is int or kind is float:
        # the numbers of a vector, one by one: printed without text_of's dispatch
        text = float_to_string(value) if kind is JFloat else str(value) if kind is int else double_to_string(value)
        return append_printed(budget, receiver, text)
    printed = ListPrint.of(value)
    if printed is None:
        return append_text(budget, receiver, budget.text_of(value))
    budget.lazy_print(printed)   # String.valueOf(list), as text_of
    return append_parts(budget, receiver, [printed], 0, [printed])


def builder_text(budget: Budget, receiver: Any, null_safe: bool) -> Any:
    """``receiver.toString()`` as a script's String result: a ``LazyText`` when the
    builder holds Lists of doubles not yet printed."""
    if type(receiver) is not JStringBuilder or not receiver.lazy:
        if receiver is None and null_safe:
            return None
        return library.call_method(budget, receiver, "toString", [])
    budget.charge(receiver.known)
    for item in receiver.lazy:
        budget.defer(item)
    return LazyText(list(receiver.parts))


def steps_spent(budget: Budget) -> None:
    raise BudgetExceeded(f"the script ran more than {budget.limits.max_steps} steps (max_steps)")


def too_deep(budget: Budget) -> None:
    raise BudgetExceeded(f"the script's functions nested more than "
                         f"{budget.limits.max_call_depth} calls deep (max_call_depth)")


def no_return() -> None:
    raise Fault("IllegalStateException", "a function ended without returning a value")


def throw(exc: Any) -> None:
    if type(exc) is not JException:
        raise Fault("ClassCastException", f"throw needs an exception, not [{type_name(exc)}]")
    raise Thrown(exc)


def iteration(items: Any) -> list:
    """The items a for-each runs over (a copy: the body may change the List)."""
    if type(items) not in (list, JArray):
        if items is None:
            raise Fault("NullPointerException", "for-each over a null value")
        raise Fault("ClassCastException", f"Cannot iterate over [{type_name(items)}]")
    return list(items)


def default_value(type_: TypeName) -> Any:
    if type_.dims:
        return None
    return {"int": 0, "short": 0, "byte": 0, "long": JLong(0), "double": 0.0, "float": JFloat(0.0),
            "boolean": False, "char": "\0"}.get(type_.name)


def plus(budget: Budget, a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is str or tb is str:
        return budget.string((a if ta is str else budget.text_of(a)) + (b if tb is str else budget.text_of(b)))
    if ta is int and tb is int and -INT_LIMIT <= a < INT_LIMIT and -INT_LIMIT <= b < INT_LIMIT:
        return wrap_int(a + b)
    return binary("+", a, b)


def compound(budget: Budget, op: str, old: Any, value: Any) -> Any:
    if op == "+":
        return plus(budget, old, value)
    if op == "&&" or op == "||":   # pragma: no cover - no such compound operator
        raise AssertionError(op)
    return binary(op, old, value)



def unary(op: str, value: Any) -> Any:
    kind = type(value)
    if op == "-":
        if kind is int:
            return wrap_int(-value) if -INT_LIMIT <= value < INT_LIMIT else wrap_long(-value)
        if kind is JLong:
            return wrap_long(-value)
        if kind is float:
            return -value
        if kind is JFloat:
            return JFloat(-value)
    elif op == "+":
        if kind in (int, JLong, float, JFloat):
            return value
    elif op == "~":
        if kind is int:
            return ~value   # ~x stays within x's own width
        if kind is JLong:
            return JLong(~value)
    raise Fault("ClassCastException", f"Cannot apply [{op}] to type [{type_name(value)}]")


def list_position(container: list, index: Any) -> int:
    if type(index) is not int:
        raise Fault("ClassCastException", f"an index must be an int, not [{type_name(index)}]")
    position = index + len(container) if index < 0 else index   # Painless allows list[-1]
    if not 0 <= position < len(container):
        raise Fault("IndexOutOfBoundsException", f"Index {index} out of bounds for length {len(container)}")
    return position


def index_get(container: Any, index: Any) -> Any:
    kind = type(container)
    if kind is list or kind is JArray:
        return container[list_position(container, index)]
    if kind is dict:
        return container.get(map_key(index))
    if container is None:
        raise Fault("NullPointerException", "Cannot read an element of a null value")
    raise Fault("IllegalArgumentException", f"Cannot read an element of [{type_name(container)}] with []")


def index_set(budget: Budget, container: Any, index: Any, value: Any) -> Any:
    kind = type(container)
    if kind is JArray:
        element = container.element
        value = library.coerce(value, element.rstrip("[]"), element.count("[]"), "as an array element") \
            if element != "def" else value
        container[list_position(container, index)] = value
        return value
    if kind is list:
        position = list_position(container, index)
        budget.list_written()
        container[position] = value
        return value
    if kind is dict:
        if map_key(index) not in container:
            budget.charge(1)
        container[index] = value
        return value
    if container is None:
        raise Fault("NullPointerException", "Cannot store an element into a null value")
    raise Fault("IllegalArgumentException", f"Cannot store an element into [{type_name(container)}] with []")
