"""What one run of a script may spend (``Limits``) and has spent (``Budget``), and how
long a script may be.

Pure. Every statement, loop iteration and call of a script costs a step; strings and
collections are charged to the allocation budget as they are made; a limit passed ends
the run with ``BudgetExceeded``, which names the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import JFloat, JLong, ListPrint, hash_map_order, java_string, table_size

__all__ = ["INSERTION_ORDER", "MAX_ALLOCATED", "MAX_CALL_DEPTH", "MAX_SOURCE_CHARS", "MAX_STEPS", "MAX_STRING_CHARS",
           "Budget", "BudgetExceeded", "Limits"]

# The defaults of ``Limits``: each ends a runaway script before it holds a worker long
# or takes much memory.
MAX_STEPS = 5_000_000          # statements run, loop iterations and calls
MAX_STRING_CHARS = 32_000_000  # the longest string or StringBuilder
MAX_ALLOCATED = 256_000_000    # characters of strings made plus collection elements added
MAX_CALL_DEPTH = 32            # nested calls of the script's own functions

MAX_SOURCE_CHARS = 100_000     # a script's source: a longer one is refused before it is parsed


@dataclass(frozen=True, slots=True)
class Limits:
    """What one run of a script may spend. Exceeding one ends the run with an error naming it."""

    max_steps: int = MAX_STEPS
    max_string_chars: int = MAX_STRING_CHARS
    max_allocated: int = MAX_ALLOCATED
    max_call_depth: int = MAX_CALL_DEPTH


class BudgetExceeded(Exception):
    pass


INSERTION_ORDER = 0          # a Map's table in Budget.tables: it iterates in insertion order


class Budget:
    """What a run has spent. ``ListPrint``s not yet printed (``lazy``) are counted at
    their most (``lazy_upper``) until that would pass a limit; then they are printed and
    counted exactly, so that a run stops exactly where it would had they been printed.

    It also knows each Map's iteration order. The Maps a script is given iterate in
    insertion order: ml-commons gives a post-process script Jackson's ``LinkedHashMap``s
    and a pre-process script gson's ``LinkedTreeMap``s. Those are the Maps reachable from
    ``params`` when the run first asks for an order (found then, once). Maps the script
    makes (``[:]``, ``new HashMap()``) are HashMaps; ``tables`` holds those whose table
    is not the one ``put`` alone grows from 16 buckets (a copy is sized to its source;
    a table does not shrink when entries leave), and the ``LinkedHashMap``s."""

    __slots__ = ("allocated", "depth", "given", "given_maps", "lazy", "lazy_upper", "limits", "line", "steps",
                 "tables", "unfrozen")

    def __init__(self, limits: Limits, params: Any = None, params_table: int = 0) -> None:
        """``params``: the run's, to tell the Maps it was given from those the script makes;
        ``params_table``: ``params`` itself is a HashMap of that many buckets (0: it keeps
        insertion order)."""
        self.limits = limits
        self.steps = 0
        self.allocated = 0
        self.depth = 0
        self.line = 0
        self.lazy: list[ListPrint] = []
        self.lazy_upper = 0
        self.unfrozen: list[ListPrint] = []   # printed lazily, still the List itself, not a copy
        self.given = params
        self.given_maps: dict[int, dict] | None = None
        # id -> (the Map, kept alive for the id to stay its; table; made; allocated): see note_map
        self.tables: dict[int, tuple[dict, int, bool, bool]] = {}
        if params is not None and params_table:
            self.note_map(params, params_table, made=True, allocated=True)

    def map_keys(self, m: dict) -> list[Any]:
        """``m.keySet()`` in ``m``'s iteration order."""
        if len(m) < 2:
            return list(m)
        known = self.tables.get(id(m))
        if known is not None and known[1] == INSERTION_ORDER:
            return list(m)
        if (known is None or not known[2]) and id(m) in self._given_maps():
            return list(m)
        return hash_map_order(m, table_size(len(m), known[1] if known is not None else 16))

    def _given_maps(self) -> dict[int, dict]:
        if self.given_maps is None:
            self.given_maps = _maps_within(self.given)
        return self.given_maps

    def hash_table(self, m: dict) -> tuple[int, bool]:
        """The buckets HashMap ``m`` has or will make on its first ``put``, and whether it
        has made them (a HashMap makes its table when it first holds an entry)."""
        known = self.tables.get(id(m))
        if known is None:
            return table_size(len(m)), bool(m)
        return table_size(len(m), known[1]), known[3] or bool(m)

    def note_map(self, m: dict, table: int, *, made: bool, allocated: bool) -> None:
        """Records Map ``m``: its table (``INSERTION_ORDER`` for a ``LinkedHashMap``),
        whether it is a HashMap even if given (the script made it with a constructor, or
        ``params`` is one), whether its table is made."""
        self.tables[id(m)] = (m, table, made, allocated)

    def map_shrinks(self, m: dict) -> None:
        """Called before an entry leaves ``m``: its table stays as large as it is."""
        known = self.tables.get(id(m))
        if known is None:
            self.tables[id(m)] = (m, table_size(len(m)), False, True)
        elif known[1] != INSERTION_ORDER:
            self.tables[id(m)] = (m, table_size(len(m), known[1]), known[2], True)

    def list_written(self) -> None:
        """Called before any List changes: the Lists printed lazily so far keep the content
        they were printed with (copied now, only when a script changes a List after it
        printed one)."""
        if self.unfrozen:
            for item in self.unfrozen:
                item.values = item.values.copy()
            self.unfrozen = []

    def charge(self, amount: int) -> None:
        self.allocated += amount
        if self.allocated + self.lazy_upper > self.limits.max_allocated:
            self._settle()

    def defer(self, item: ListPrint) -> None:
        """Charges ``item``'s text once, printed only if the run comes near its limit."""
        self.lazy.append(item)
        self.lazy_upper += item.upper
        if self.allocated + self.lazy_upper > self.limits.max_allocated:
            self._settle()

    def _settle(self) -> None:
        self.allocated += sum(len(item.text()) for item in self.lazy)
        self.lazy, self.lazy_upper = [], 0
        if self.allocated > self.limits.max_allocated:
            raise BudgetExceeded(f"the script allocated more than {self.limits.max_allocated} "
                                 "characters and elements (max_allocated)")

    def text_of(self, value: Any) -> str:
        """``String.valueOf(value)``, charged; a List or Map is measured before it is
        printed (lists that share lists can print far larger than they are)."""
        if type(value) in (list, dict):
            _check_printable(value, self.limits.max_string_chars)
            return self.string(java_string(value, self.map_keys))
        return self.string(java_string(value))

    def string(self, text: str) -> str:
        self.check_size(len(text))
        self.charge(len(text))
        return text

    def check_size(self, size: int) -> None:
        if size > self.limits.max_string_chars:
            raise BudgetExceeded(f"the script built a string longer than {self.limits.max_string_chars} "
                                 "characters (max_string_chars)")

    def lazy_print(self, item: ListPrint) -> None:
        """``text_of`` of a List left unprinted: the same checks, the same charge."""
        if 2 * len(item.values) > self.limits.max_string_chars:
            _check_printable(item.values, self.limits.max_string_chars)
        self.lazy_string(0, [item])
        self.unfrozen.append(item)

    def lazy_string(self, known: int, lazy: list[ListPrint]) -> None:
        """Checks and charges a string made of ``known`` characters of strings
        and the ``lazy`` prints; those are printed only if their most would pass a limit."""
        upper = known
        for item in lazy:
            upper += item.upper
        if upper > self.limits.max_string_chars:
            self.check_size(known + sum(len(item.text()) for item in lazy))
        self.allocated += known
        for item in lazy:
            self.lazy.append(item)
            self.lazy_upper += item.upper
        if self.allocated + self.lazy_upper > self.limits.max_allocated:
            self._settle()


def _maps_within(root: Any) -> dict[int, dict]:
    """The Maps reachable from ``root`` through Maps and Lists, by id. A List of numbers
    (an embedding) is passed over with one ``sum``."""
    found: dict[int, dict] = {}
    seen_lists: set[int] = set()
    pending = [root]
    while pending:
        value = pending.pop()
        if type(value) is dict:
            if id(value) in found:
                continue
            found[id(value)] = value
            items: Any = value.values()
        elif type(value) is list and id(value) not in seen_lists:
            seen_lists.add(id(value))
            try:
                sum(value)
                continue
            except TypeError:
                items = value
        else:
            continue
        pending.extend([item for item in items if type(item) is dict or type(item) is list])
    return found


_SCALARS = frozenset({float, int, bool, type(None), JLong, JFloat})


def _check_printable(value: Any, limit: int) -> None:
    if _printed_size(value, limit, {}, set()) > limit:
        raise BudgetExceeded(f"the script would print a value longer than {limit} characters (max_string_chars)")


def _printed_size(value: Any, limit: int, sizes: dict[int, int], open_ids: set[int]) -> int:
    """A lower bound of the length of ``value``'s text (two characters an element, a
    string's length), each shared List or Map measured once; one that contains itself
    is refused (Java would print it as "(this Collection)")."""
    key = id(value)
    if key in sizes:
        return sizes[key]
    if key in open_ids:
        raise BudgetExceeded("the script would print a List or Map that contains itself")
    open_ids.add(key)
    parts = [part for pair in value.items() for part in pair] if type(value) is dict else value
    size = 2 * len(value)
    if not set(map(type, parts)) <= _SCALARS:
        for part in parts:
            if type(part) is str:
                size += len(part)
            elif type(part) in (list, dict):
                size += _printed_size(part, limit, sizes, open_ids)
            if size > limit:
                break
    open_ids.discard(key)
    sizes[key] = size
    return size
