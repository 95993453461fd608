"""The whitelist: every method, static, field and constructor a script may use, and the
casts between types. Anything not named here does not exist for a script (there is no
reflection to find it). Pure; each call that makes a string or grows a collection is
charged to the run's ``Budget``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from .budget import INSERTION_ORDER, Budget
from .operators import Fault, equals, is_long, is_number
from .values import (
    JArray,
    JException,
    JFloat,
    JLong,
    JStringBuilder,
    ListPrint,
    double_to_string,
    float_to_string,
    from_units,
    java_hash,
    java_string,
    table_size,
    type_name,
    utf16_length,
    utf16_units,
    wide_count,
    wrap_int,
    wrap_long,
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


def map_key(key: Any) -> Any:
    """A value usable as a Map key here: Lists and Maps are not (their Java hash follows
    their contents, which this interpreter does not track)."""
    if type(key) in (list, dict, JArray):
        raise Fault("IllegalArgumentException", f"a [{type_name(key)}] cannot be a Map key in a script")
    return key


def _npe(what: str) -> Fault:
    return Fault("NullPointerException", what)


def _need(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or type(value) is bool and kind is not bool:
        if value is None:
            raise _npe(f"{what} is null")
        raise Fault("ClassCastException", f"{what} must be {_kind_name(kind)}, not [{type_name(value)}]")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a String", int: "an int", list: "a List", dict: "a Map"}
    return names.get(kind, "a number") if isinstance(kind, type) else "a number"


def _index(value: Any, what: str = "index") -> int:
    if type(value) is not int:
        raise Fault("ClassCastException", f"{what} must be an int, not [{type_name(value)}]")
    return value


def _text(value: Any, what: str) -> str:
    """A CharSequence argument."""
    if type(value) is str:
        return value
    if type(value) is JStringBuilder:
        return value.text()
    if value is None:
        raise _npe(f"{what} is null")
    raise Fault("ClassCastException", f"{what} must be a String, not [{type_name(value)}]")


def _bounds(index: int, length: int, kind: str = "Index") -> None:
    if not 0 <= index < length:
        raise Fault(f"{'StringIndexOutOfBoundsException' if kind == 'String' else 'IndexOutOfBoundsException'}",
                    f"Index {index} out of bounds for length {length}")


# ------------------------------------------------------------------ String

def _substring(s: str, begin: Any, end: Any = None) -> str:
    units = utf16_units(s)
    b = _index(begin)
    e = len(units) if end is None else _index(end)
    if b < 0 or e > len(units) or b > e:
        raise Fault("StringIndexOutOfBoundsException", f"begin {b}, end {e}, length {len(units)}")
    return s[b:e] if units is s else from_units(units[b:e])


def _index_of(s: str, target: Any, start: Any = 0) -> int:
    text = _text(target, "the searched text")
    units = utf16_units(s)
    return units.find(text if units is s else utf16_units(text), max(_index(start), 0))


def _last_index_of(s: str, target: Any) -> int:
    text = _text(target, "the searched text")
    units = utf16_units(s)
    return units.rfind(text if units is s else utf16_units(text))


def _char_at(s: str, i: Any) -> str:
    """A ``char``: a one-unit String (half of a surrogate pair, when ``i`` points there)."""
    units = utf16_units(s)
    _bounds(_index(i), len(units), "String")
    return units[i]


def _java_trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


_REGEX_CHARS = frozenset(".$|()[{^?*+\\")
# The regular expressions split() takes besides plain text: each runs in linear time.
# Any other (a catastrophic-backtracking one could hold a worker) is refused.
SPLIT_REGEXES = frozenset({r"\s+", r"\s*,\s*", r",\s*", r"\s", r"\s*", r"\|", r"\.", r"\n", r"\t",
                           r"\r?\n", r"\\", r"\s*;\s*", r"\s*\|\s*"})


def _split(s: str, pattern: Any, budget: Budget) -> list[str]:
    regex = _text(pattern, "the split pattern")
    if not _REGEX_CHARS.isdisjoint(regex) and regex not in SPLIT_REGEXES:
        raise Fault("IllegalArgumentException", f"split with the regular expression [{regex}] is not supported "
                    "in scripts: split on plain text, use splitOnToken, or one of " + " ".join(sorted(SPLIT_REGEXES)))
    parts = re.split(regex, s) if regex in SPLIT_REGEXES else s.split(regex) if regex else list(utf16_units(s))
    if parts and parts[0] == "" and s and regex in SPLIT_REGEXES and re.match(regex, s).end() == 0:
        parts = parts[1:]   # Java drops the empty first part of a zero-width match
    while parts and parts[-1] == "":
        parts.pop()         # String.split drops trailing empty strings
    if not parts:
        parts = [] if s else [""]
    budget.charge(len(parts))
    return JArray(parts, "String")   # a String[], as in Java


def _split_on_token(s: str, token: Any, budget: Budget) -> list[str]:
    sep = _text(token, "the token")
    if not sep:
        raise Fault("IllegalArgumentException", "Cannot split on an empty token")
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    budget.charge(len(parts))
    return JArray(parts, "String")


def _compare_to(a: Any, b: Any) -> int:
    if b is None:
        raise _npe("compareTo(null)")
    if type(a) is str:
        b = utf16_units(_text(b, "the compared text"))   # Java compares UTF-16 units
        a = utf16_units(a)
        for x, y in zip(a, b):
            if x != y:
                return ord(x) - ord(y)
        return len(a) - len(b)
    if not is_number(b):
        raise Fault("ClassCastException", f"cannot compare [{type_name(a)}] to [{type_name(b)}]")
    return (a > b) - (a < b)


_STRING: dict[tuple[str, int], Callable[..., Any]] = {
    ("length", 0): lambda b, s: utf16_length(s),
    ("isEmpty", 0): lambda b, s: not s,
    ("isBlank", 0): lambda b, s: not s.strip(),
    ("contains", 1): lambda b, s, t: _text(t, "the searched text") in s,
    ("replace", 2): lambda b, s, x, y: b.string(s.replace(_text(x, "the replaced text"),
                                                          _text(y, "the replacement"))),
    ("substring", 1): lambda b, s, i: _substring(s, i),
    ("substring", 2): lambda b, s, i, j: _substring(s, i, j),
    ("indexOf", 1): lambda b, s, t: _index_of(s, t),
    ("indexOf", 2): lambda b, s, t, i: _index_of(s, t, i),
    ("lastIndexOf", 1): lambda b, s, t: _last_index_of(s, t),
    ("startsWith", 1): lambda b, s, t: s.startswith(_text(t, "the prefix")),
    ("endsWith", 1): lambda b, s, t: s.endswith(_text(t, "the suffix")),
    ("equalsIgnoreCase", 1): lambda b, s, t: type(t) is str and s.lower() == t.lower(),
    ("trim", 0): lambda b, s: _java_trim(s),
    ("strip", 0): lambda b, s: s.strip(),
    ("toLowerCase", 0): lambda b, s: s.lower(),
    ("toUpperCase", 0): lambda b, s: s.upper(),
    ("charAt", 1): lambda b, s, i: _char_at(s, i),
    ("concat", 1): lambda b, s, t: b.string(s + _text(t, "the concatenated text")),
    ("split", 1): lambda b, s, p: _split(s, p, b),
    ("splitOnToken", 1): lambda b, s, t: _split_on_token(s, t, b),
    ("compareTo", 1): lambda b, s, t: _compare_to(s, t),
}


# ------------------------------------------------------------------ List, Map

def _list_get(lst: list, i: Any) -> Any:
    index = _index(i)
    _bounds(index, len(lst))
    return lst[index]


def _list_add(budget: Budget, lst: list, value: Any) -> bool:
    if type(lst) is JArray:
        raise Fault("UnsupportedOperationException", "an array has a fixed length")
    budget.charge(1)
    budget.list_written()
    lst.append(value)
    return True


def _list_insert(budget: Budget, lst: list, i: Any, value: Any) -> None:
    index = _index(i)
    if not 0 <= index <= len(lst):
        raise Fault("IndexOutOfBoundsException", f"Index: {index}, Size: {len(lst)}")
    budget.charge(1)
    budget.list_written()
    lst.insert(index, value)


def _list_add_all(budget: Budget, lst: list, other: Any) -> bool:
    items = _need(other, list, "addAll's argument")
    budget.charge(len(items))
    budget.list_written()
    lst.extend(items)
    return bool(items)


def _list_set(lst: list, i: Any, value: Any) -> Any:
    index = _index(i)
    _bounds(index, len(lst))
    old, lst[index] = lst[index], value
    return old


def _list_remove(lst: list, item: Any) -> Any:
    if type(item) is int:           # remove(int index)
        _bounds(item, len(lst))
        return lst.pop(item)
    for position, value in enumerate(lst):
        if equals(value, item):
            del lst[position]
            return True
    return False


def _list_index_of(lst: list, item: Any) -> int:
    return next((i for i, value in enumerate(lst) if equals(value, item)), -1)


def _sub_list(budget: Budget, lst: list, i: Any, j: Any) -> list:
    b, e = _index(i), _index(j)
    if b < 0 or e > len(lst) or b > e:
        raise Fault("IndexOutOfBoundsException", f"fromIndex {b}, toIndex {e}, size {len(lst)}")
    budget.charge(e - b)
    return lst[b:e]


_LIST: dict[tuple[str, int], Callable[..., Any]] = {
    ("size", 0): lambda b, l: len(l),
    ("isEmpty", 0): lambda b, l: not l,
    ("get", 1): lambda b, l, i: _list_get(l, i),
    ("add", 1): lambda b, l, v: _list_add(b, l, v),
    ("add", 2): lambda b, l, i, v: _list_insert(b, l, i, v),
    ("addAll", 1): lambda b, l, o: _list_add_all(b, l, o),
    ("set", 2): lambda b, l, i, v: (b.list_written(), _list_set(l, i, v))[1],
    ("remove", 1): lambda b, l, v: (b.list_written(), _list_remove(l, v))[1],
    ("contains", 1): lambda b, l, v: _list_index_of(l, v) >= 0,
    ("indexOf", 1): lambda b, l, v: _list_index_of(l, v),
    ("clear", 0): lambda b, l: (b.list_written(), l.clear())[1],
    ("subList", 2): lambda b, l, i, j: _sub_list(b, l, i, j),
    ("getLength", 0): lambda b, l: len(l),
}


def _map_put(budget: Budget, m: dict, key: Any, value: Any) -> Any:
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
    items = _need(other, dict, "putAll's argument")
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


_MAP: dict[tuple[str, int], Callable[..., Any]] = {
    ("size", 0): lambda b, m: len(m),
    ("isEmpty", 0): lambda b, m: not m,
    ("get", 1): lambda b, m, k: m.get(map_key(k)),
    ("getOrDefault", 2): lambda b, m, k, d: m.get(map_key(k), d),
    ("put", 2): lambda b, m, k, v: _map_put(b, m, k, v),
    ("putAll", 1): lambda b, m, o: _map_put_all(b, m, o),
    ("containsKey", 1): lambda b, m, k: map_key(k) in m,
    ("containsValue", 1): lambda b, m, v: any(equals(x, v) for x in m.values()),
    ("remove", 1): _map_remove,
    ("clear", 0): _map_clear,
    ("keySet", 0): lambda b, m: (b.charge(len(m)), b.map_keys(m))[1],
    ("values", 0): lambda b, m: (b.charge(len(m)), [m[k] for k in b.map_keys(m)])[1],
}


# ------------------------------------------------------------------ StringBuilder

def _append(budget: Budget, sb: JStringBuilder, value: Any) -> JStringBuilder:
    return append_text(budget, sb, value if type(value) is str else budget.text_of(value))


def append_text(budget: Budget, sb: JStringBuilder, text: str) -> JStringBuilder:
    size = sb.known + sb.lazy_upper + len(text)
    if size > budget.limits.max_string_chars:
        budget.check_size(sb.length + len(text))
    budget.charge(len(text))
    sb.parts.append(text)
    sb.known += len(text)
    if not text.isascii():
        sb.wide += wide_count(text)
    return sb


def append_printed(budget: Budget, sb: JStringBuilder, text: str) -> JStringBuilder:
    """``sb.append(number)`` given the number's printed ASCII ``text``: ``text_of``'s and
    ``append_text``'s checks and charges, in their order, in one call (the hot path of a
    script that appends a vector number by number)."""
    size, limits = len(text), budget.limits
    if size > limits.max_string_chars:
        budget.check_size(size)
    budget.allocated += size
    if budget.allocated + budget.lazy_upper > limits.max_allocated:
        budget.charge(0)
    if sb.known + sb.lazy_upper + size > limits.max_string_chars:
        budget.check_size(sb.length + size)
    budget.allocated += size
    if budget.allocated + budget.lazy_upper > limits.max_allocated:
        budget.charge(0)
    sb.parts.append(text)
    sb.known += size   # ASCII: no UTF-16 pairs to count (sb.wide)
    return sb


def append_parts(budget: Budget, sb: JStringBuilder, parts: list[str | ListPrint], known: int,
                 lazy: list[ListPrint]) -> JStringBuilder:
    """``sb.append(text)`` for a text made of ``parts`` (``known`` characters of strings
    and the ``lazy`` prints), charged as the string it is."""
    if sb.known + sb.lazy_upper + known + sum(item.upper for item in lazy) > budget.limits.max_string_chars:
        budget.check_size(sb.length + known + sum(len(item.text()) for item in lazy))
    budget.charge(known)
    for item in lazy:
        budget.defer(item)
    sb.parts.extend(parts)
    sb.known += known
    sb.wide += sum([wide_count(part) for part in parts if type(part) is str])
    sb.add_lazy(lazy)
    return sb


def _edit(budget: Budget, sb: JStringBuilder, units: str) -> JStringBuilder:
    """The builder now holds the String of UTF-16 ``units``, charged as a new string."""
    sb.reset(budget.string(from_units(units)))
    return sb


def _insert(budget: Budget, sb: JStringBuilder, i: Any, value: Any) -> JStringBuilder:
    index = _index(i)
    current = utf16_units(sb.text())
    if not 0 <= index <= len(current):
        raise Fault("StringIndexOutOfBoundsException", f"offset {index}, length {len(current)}")
    return _edit(budget, sb, current[:index] + utf16_units(budget.text_of(value)) + current[index:])


def _set_length(budget: Budget, sb: JStringBuilder, n: Any) -> None:
    size = _index(n)
    if size < 0:
        raise Fault("StringIndexOutOfBoundsException", f"length {size}")
    current = utf16_units(sb.text())
    _edit(budget, sb, current[:size] + "\0" * max(0, size - len(current)))


def _delete_char_at(budget: Budget, sb: JStringBuilder, i: Any) -> JStringBuilder:
    index = _index(i)
    current = utf16_units(sb.text())
    _bounds(index, len(current), "String")
    return _edit(budget, sb, current[:index] + current[index + 1:])


def _reverse(budget: Budget, sb: JStringBuilder) -> JStringBuilder:
    # Java reverses the units, then puts each surrogate pair back in order: a character
    # past U+FFFF (one code point here) stays whole; lone surrogates may pair anew.
    return _edit(budget, sb, utf16_units(sb.text()[::-1]))


_BUILDER: dict[tuple[str, int], Callable[..., Any]] = {
    ("append", 1): _append,
    ("length", 0): lambda b, sb: sb.units(),
    ("toString", 0): lambda b, sb: (b.charge(sb.length), sb.text())[1],
    ("insert", 2): _insert,
    ("setLength", 1): _set_length,
    ("charAt", 1): lambda b, sb, i: _char_at(sb.text(), i),
    ("deleteCharAt", 1): _delete_char_at,
    ("reverse", 0): _reverse,
    ("isEmpty", 0): lambda b, sb: sb.length == 0,
}


# ------------------------------------------------------------------ numbers, booleans, the rest

def _to_int(value: Any) -> int:
    """``(int)`` of any number: doubles truncate and saturate, longs wrap."""
    if type(value) in (float, JFloat):
        if math.isnan(value):
            return 0
        return max(-2**31, min(2**31 - 1, int(value))) if not math.isinf(value) else (
            2**31 - 1 if value > 0 else -2**31)
    if type(value) is Decimal:
        return wrap_int(int(value))
    return wrap_int(int(value))


def _to_long(value: Any) -> JLong:
    if type(value) in (float, JFloat):
        if math.isnan(value):
            return JLong(0)
        if math.isinf(value):
            return JLong(2**63 - 1 if value > 0 else -2**63)
        return JLong(max(-2**63, min(2**63 - 1, int(value))))
    return wrap_long(int(value))


_NUMBER: dict[tuple[str, int], Callable[..., Any]] = {
    ("intValue", 0): lambda b, n: _to_int(n),
    ("longValue", 0): lambda b, n: _to_long(n),
    ("doubleValue", 0): lambda b, n: float(n),
    ("floatValue", 0): lambda b, n: JFloat.of(float(n)),
    ("compareTo", 1): lambda b, n, o: _compare_to(n, o),
    ("isNaN", 0): lambda b, n: math.isnan(n),
    ("isInfinite", 0): lambda b, n: type(n) in (float, JFloat) and math.isinf(n),
}
_DECIMAL: dict[tuple[str, int], Callable[..., Any]] = {
    ("intValue", 0): lambda b, n: _to_int(n),
    ("longValue", 0): lambda b, n: _to_long(n),
    ("doubleValue", 0): lambda b, n: float(n),
    ("floatValue", 0): lambda b, n: JFloat.of(float(n)),
    ("toPlainString", 0): lambda b, n: format(n, "f"),
}
_BOOLEAN: dict[tuple[str, int], Callable[..., Any]] = {("booleanValue", 0): lambda b, v: v}
_EXCEPTION: dict[tuple[str, int], Callable[..., Any]] = {("getMessage", 0): lambda b, e: e.message}

_METHODS: dict[type, dict[tuple[str, int], Callable[..., Any]]] = {
    str: _STRING, list: _LIST, JArray: {}, dict: _MAP, JStringBuilder: _BUILDER, int: _NUMBER,
    JLong: _NUMBER, float: _NUMBER, JFloat: _NUMBER, Decimal: _DECIMAL, bool: _BOOLEAN,
    JException: _EXCEPTION,
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
        raise _npe(f"Cannot invoke [{name}] on a null value")
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
            return _list_get(receiver, int(name))
    elif kind is str and name == "empty":
        return not receiver
    if receiver is None:
        raise _npe(f"Cannot access field [{name}] of a null value")
    raise Fault("IllegalArgumentException", f"dynamic getter [{type_name(receiver)}, {name}] not found")


def set_field(budget: Budget, receiver: Any, name: str, value: Any) -> None:
    if type(receiver) is dict:
        _map_put(budget, receiver, name, value)
        return
    if type(receiver) is list and name.isdigit():
        _list_set(receiver, int(name), value)
        return
    if receiver is None:
        raise _npe(f"Cannot set field [{name}] of a null value")
    raise Fault("IllegalArgumentException", f"dynamic setter [{type_name(receiver)}, {name}] not found")


# ------------------------------------------------------------------ statics

def _parse_int(text: Any, bits: int) -> int:
    s = _text(text, "the parsed text")
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise Fault("NumberFormatException", f'For input string: "{s}"')
    value = int(s)
    if not -2**(bits - 1) <= value < 2**(bits - 1):
        raise Fault("NumberFormatException", f'For input string: "{s}"')
    return value if bits == 32 else JLong(value)


_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")


def _parse_double(text: Any) -> float:
    s = _java_trim(_text(text, "the parsed text"))
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
    return _to_int(float(value)) if type(a) is JFloat else _to_long(float(value))


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
    sep = _text(delimiter, "the delimiter")
    parts = _need(items, list, "the joined elements")
    return budget.string(sep.join(_text(p, "an element") if p is not None else "null" for p in parts))


def _log(x: float) -> float:
    if x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log(x)


_STATICS: dict[tuple[str, str, int], Callable[..., Any]] = {
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
    ("Integer", "toString", 1): lambda b, n: java_string(_need(n, int, "the number")),
    ("Long", "parseLong", 1): lambda b, s: _parse_int(s, 64),
    ("Long", "valueOf", 1): lambda b, s: JLong(s) if type(s) in (int, JLong) else _parse_int(s, 64),
    ("Long", "toString", 1): lambda b, n: java_string(_need(n, int, "the number")),
    ("Double", "parseDouble", 1): lambda b, s: _parse_double(s),
    ("Double", "valueOf", 1): lambda b, s: float(s) if is_number(s) else _parse_double(s),
    ("Double", "toString", 1): lambda b, n: double_to_string(float(_need(n, (int, float), "the number"))),
    ("Double", "isNaN", 1): lambda b, n: is_number(n) and math.isnan(n),
    ("Float", "parseFloat", 1): lambda b, s: JFloat.of(_parse_double(s)),
    ("Float", "toString", 1): lambda b, n: float_to_string(JFloat.of(float(_need(n, (int, float), "the number")))),
    ("Boolean", "parseBoolean", 1): lambda b, s: type(s) is str and s.lower() == "true",
    ("Boolean", "valueOf", 1): lambda b, s: s if type(s) is bool else (type(s) is str and s.lower() == "true"),
    ("Boolean", "toString", 1): lambda b, v: java_string(v),
    ("String", "valueOf", 1): lambda b, v: b.text_of(v),
    ("String", "join", 2): _join,
}

_STATIC_FIELDS: dict[tuple[str, str], Any] = {
    ("Integer", "MAX_VALUE"): 2**31 - 1, ("Integer", "MIN_VALUE"): -2**31,
    ("Long", "MAX_VALUE"): JLong(2**63 - 1), ("Long", "MIN_VALUE"): JLong(-2**63),
    ("Double", "MAX_VALUE"): 1.7976931348623157e308, ("Double", "MIN_VALUE"): 5e-324,
    ("Double", "POSITIVE_INFINITY"): math.inf, ("Double", "NEGATIVE_INFINITY"): -math.inf,
    ("Double", "NaN"): math.nan, ("Math", "PI"): math.pi, ("Math", "E"): math.e,
}


def has_static(type_: str, name: str, arity: int) -> bool:
    return (type_, name, arity) in _STATICS


def has_static_field(type_: str, name: str) -> bool:
    return (type_, name) in _STATIC_FIELDS


def call_static(budget: Budget, type_: str, name: str, args: list[Any]) -> Any:
    return _STATICS[(type_, name, len(args))](budget, *args)


def static_field(type_: str, name: str) -> Any:
    return _STATIC_FIELDS[(type_, name)]


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
    return JStringBuilder(budget.string(_text(args[0], "the StringBuilder's text")))


def _new_list(budget: Budget, args: list[Any]) -> list:
    if not args or type(args[0]) is int:
        return []
    items = _need(args[0], list, "the copied collection")
    budget.charge(len(items))
    return list(items)


def _new_map(budget: Budget, args: list[Any], *, linked: bool = False) -> dict:
    """``new HashMap()``, ``new HashMap(map)``, the same of ``LinkedHashMap``: a copy
    puts the entries in its source's order, in a table sized to them."""
    items = _need(args[0], dict, "the copied map") if args else {}
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
    ("String", 1): lambda b, a: _text(a[0], "the copied text"),
}
for _name in EXCEPTIONS:
    _CONSTRUCTORS[(_name, 0)] = lambda b, a, _n=_name: JException(_n, None)
    _CONSTRUCTORS[(_name, 1)] = lambda b, a, _n=_name: JException(
        _n, None if a[0] is None else _text(a[0], "the exception's message"))


def has_constructor(type_: str, arity: int) -> bool:
    return (type_, arity) in _CONSTRUCTORS


def construct(budget: Budget, type_: str, args: list[Any]) -> Any:
    return _CONSTRUCTORS[(type_, len(args))](budget, args)


# ------------------------------------------------------------------ arrays and casts

_ARRAY_DEFAULTS = {"int": 0, "long": JLong(0), "short": 0, "byte": 0, "double": 0.0, "float": JFloat(0.0),
                   "boolean": False, "char": "\0"}


def new_array(budget: Budget, element: str, dims: int, sizes: list[Any]) -> JArray:
    size = _index(sizes[0], "an array size")
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
            v = _to_int(value)
            bits = _INTEGRAL[type_]
            return ((v + 2**(bits - 1)) % 2**bits) - 2**(bits - 1)
        if type_ == "long":
            return _to_long(value)
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
