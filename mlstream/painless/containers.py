"""The whitelist's List and Map methods. A List is a Python ``list``, a Map a ``dict``
whose Java iteration order the run's ``Budget`` knows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .arguments import check_bounds, int_argument, map_key, need
from .budget import INSERTION_ORDER, Budget
from .operators import Fault, equals
from .values import (
    JArray,
    table_size,
)

__all__ = ["LIST_METHODS", "MAP_METHODS", "list_get", "list_set", "map_put", "presized_table"]


def list_get(lst: list, i: Any) -> Any:
    index = int_argument(i)
    check_bounds(index, len(lst))
    return lst[index]


def _list_add(budget: Budget, lst: list, value: Any) -> bool:
    if type(lst) is JArray:
        raise Fault("UnsupportedOperationException", "an array has a fixed length")
    budget.charge(1)
    budget.list_written()
    lst.append(value)
    return True


def _list_insert(budget: Budget, lst: list, i: Any, value: Any) -> None:
    index = int_argument(i)
    if not 0 <= index <= len(lst):
        raise Fault("IndexOutOfBoundsException", f"Index: {index}, Size: {len(lst)}")
    budget.charge(1)
    budget.list_written()
    lst.insert(index, value)


def _list_add_all(budget: Budget, lst: list, other: Any) -> bool:
    items = need(other, list, "addAll's argument")
    budget.charge(len(items))
    budget.list_written()
    lst.extend(items)
    return bool(items)


def list_set(lst: list, i: Any, value: Any) -> Any:
    index = int_argument(i)
    check_bounds(index, len(lst))
    old, lst[index] = lst[index], value
    return old


def _list_remove(lst: list, item: Any) -> Any:
    if type(item) is int:           # remove(int index)
        check_bounds(item, len(lst))
        return lst.pop(item)
    for position, value in enumerate(lst):
        if equals(value, item):
            del lst[position]
            return True
    return False


def _list_index_of(lst: list, item: Any) -> int:
    return next((i for i, value in enumerate(lst) if equals(value, item)), -1)


def _sub_list(budget: Budget, lst: list, i: Any, j: Any) -> list:
    b, e = int_argument(i), int_argument(j)
    if b < 0 or e > len(lst) or b > e:
        raise Fault("IndexOutOfBoundsException", f"fromIndex {b}, toIndex {e}, size {len(lst)}")
    budget.charge(e - b)
    return lst[b:e]


LIST_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("size", 0): lambda b, l: len(l),
    ("isEmpty", 0): lambda b, l: not l,
    ("get", 1): lambda b, l, i: list_get(l, i),
    ("add", 1): lambda b, l, v: _list_add(b, l, v),
    ("add", 2): lambda b, l, i, v: _list_insert(b, l, i, v),
    ("addAll", 1): lambda b, l, o: _list_add_all(b, l, o),
    ("set", 2): lambda b, l, i, v: (b.list_written(), list_set(l, i, v))[1],
    ("remove", 1): lambda b, l, v: (b.list_written(), _list_remove(l, v))[1],
    ("contains", 1): lambda b, l, v: _list_index_of(l, v) >= 0,
    ("indexOf", 1): lambda b, l, v: _list_index_of(l, v),
    ("clear", 0): lambda b, l: (b.list_written(), l.clear())[1],
    ("subList", 2): lambda b, l, i, j: _sub_list(b, l, i, j),
    ("getLength", 0): lambda b, l: len(l),
}


def map_put(budget: Budget, m: dict, key: Any, value: Any) -> Any:
    old = m.get(map_key(key))
    if key not in m:
        budget.charge(1)
    m[key] = value
    return old


def presized_table(size: int) -> int:
    """The table HashMap(Map) and putAll on a table not yet made size for ``size``
    entries (Java 19 on): ``tableSizeFor(ceil(size / 0.75))``."""
    return 1 << (math.ceil(size / 0.75) - 1).bit_length()


def _map_put_all(budget: Budget, m: dict, other: Any) -> None:
    items = need(other, dict, "putAll's argument")
    budget.charge(len(items))
    if items:
        table, allocated = budget.hash_table(m)
        known = budget.tables.get(id(m))
        if known is None or known[1] != INSERTION_ORDER:
            # before it puts, putAll sizes the table for the other Map's size alone
            table = table_size(len(items), table) if allocated else presized_table(len(items))
            budget.note_map(m, table, made=known is not None and known[2], allocated=True)
    m.update([(key, items[key]) for key in budget.map_keys(items)])


def _map_remove(budget: Budget, m: dict, key: Any) -> Any:
    if map_key(key) not in m:
        return None
    budget.map_shrinks(m)
    return m.pop(key)


def _map_clear(budget: Budget, m: dict) -> None:
    if m:
        budget.map_shrinks(m)
        m.clear()


MAP_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("size", 0): lambda b, m: len(m),
    ("isEmpty", 0): lambda b, m: not m,
    ("get", 1): lambda b, m, k: m.get(map_key(k)),
    ("getOrDefault", 2): lambda b, m, k, d: m.get(map_key(k), d),
    ("put", 2): lambda b, m, k, v: map_put(b, m, k, v),
    ("putAll", 1): lambda b, m, o: _map_put_all(b, m, o),
    ("containsKey", 1): lambda b, m, k: map_key(k) in m,
    ("containsValue", 1): lambda b, m, v: any(equals(x, v) for x in m.values()),
    ("remove", 1): _map_remove,
    ("clear", 0): _map_clear,
    ("keySet", 0): lambda b, m: (b.charge(len(m)), b.map_keys(m))[1],
    ("values", 0): lambda b, m: (b.charge(len(m)), [m[k] for k in b.map_keys(m)])[1],
}
