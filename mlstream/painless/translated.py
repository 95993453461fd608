"""The namespace the Python that ``pysource`` writes runs in: ``semantics``' operations
and the whitelist's entry points under the short names the translated code uses, and
the few helpers only it needs. Each helper does what the closure of the same construct
does (``runtime``). Its builtins are only ``type``, ``len`` and the types it tests for.
"""

from __future__ import annotations

from typing import Any

from . import library
from .arguments import map_key
from .budget import Budget
from .operators import binary, equals, truthy
from .semantics import (
    Concat,
    append_concat,
    append_value,
    builder_text,
    compound,
    index_get,
    index_set,
    iteration,
    no_return,
    plus,
    steps_spent,
    throw,
    too_deep,
    unary,
)
from .strings import append_text
from .values import JArray, JFloat, JStringBuilder, LazyText

__all__ = ["EQUAL_FAST", "NAMESPACE", "PLAIN_NUMBERS"]

PLAIN_NUMBERS = frozenset({int, float})
EQUAL_FAST = frozenset({int, float, str})   # types whose == is Painless' equals between two of them


def _field_null_safe(value: Any, name: str) -> Any:
    return None if value is None else library.get_field(value, name)


def _set_field(budget: Budget, receiver: Any, name: str, value: Any) -> Any:
    library.set_field(budget, receiver, name, value)
    return value


def _set_field_post(budget: Budget, receiver: Any, name: str, old: Any, value: Any) -> Any:
    library.set_field(budget, receiver, name, value)
    return old


def _set_index_post(budget: Budget, receiver: Any, index: Any, old: Any, value: Any) -> Any:
    index_set(budget, receiver, index, value)
    return old


def _steps_to(budget: Budget, steps: int) -> Budget:
    budget.steps = steps
    return budget


def _first(old: Any, _new: Any) -> Any:
    return old


def _charge(budget: Budget, size: int) -> None:
    budget.charge(size)


def _lazy_result(pieces: tuple[Any, list | None, int, list]) -> Any:
    value, parts, _, _ = pieces
    return value if parts is None else LazyText(parts)


def _string_result(value: Any) -> Any:
    if type(value) is LazyText:
        return value
    return library.coerce(value, "String", 0, "as the return value")


NAMESPACE: dict[str, Any] = {
    "__builtins__": {"type": type, "len": len, "list": list, "dict": dict, "int": int, "float": float, "str": str,
                     "BaseException": BaseException, "hasattr": hasattr},
    "binary": binary, "equals": equals, "truthy": truthy, "plus": plus, "compound": compound,
    "unary": unary, "index_get": index_get, "index_set": index_set, "Concat": Concat,
    "append_concat": append_concat, "append_value": append_value, "append_text": append_text,
    "builder_text": builder_text, "steps_spent": steps_spent, "too_deep": too_deep,
    "no_return": no_return, "throw": throw, "iterable": iteration, "get_field": library.get_field,
    "field_null_safe": _field_null_safe, "set_field": _set_field, "set_field_post": _set_field_post,
    "set_index_post": _set_index_post, "first": _first, "steps_to": _steps_to, "charge": _charge,
    "lazy_result": _lazy_result, "string_result": _string_result, "coerce": library.coerce,
    "cast": library.cast, "is_instance": library.is_instance, "construct": library.construct,
    "new_array": library.new_array, "call_method": library.call_method, "call_static": library.call_static,
    "map_key": map_key, "float32": JFloat.of, "JArray": JArray, "JStringBuilder": JStringBuilder,
    "PLAIN": PLAIN_NUMBERS, "EQUAL_FAST": EQUAL_FAST,
}
