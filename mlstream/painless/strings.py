"""The whitelist's String and StringBuilder methods. A String is a Python ``str`` (its
length and indexes counted in UTF-16 units, as Java's), a StringBuilder a ``JStringBuilder``
that may hold Lists of doubles not yet printed (``append_parts``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .arguments import check_bounds, int_argument, npe, text_argument
from .budget import Budget
from .operators import Fault, is_number
from .values import (
    JArray,
    JStringBuilder,
    ListPrint,
    from_units,
    type_name,
    utf16_length,
    utf16_units,
    wide_count,
)

__all__ = ["BUILDER_METHODS", "SPLIT_REGEXES", "STRING_METHODS", "append_parts", "append_printed", "append_text", "char_at", "compare_to", "java_trim"]


def _substring(s: str, begin: Any, end: Any = None) -> str:
    units = utf16_units(s)
    b = int_argument(begin)
    e = len(units) if end is None else int_argument(end)
    if b < 0 or e > len(units) or b > e:
        raise Fault("StringIndexOutOfBoundsException", f"begin {b}, end {e}, length {len(units)}")
    return s[b:e] if units is s else from_units(units[b:e])


def _index_of(s: str, target: Any, start: Any = 0) -> int:
    text = text_argument(target, "the searched text")
    units = utf16_units(s)
    return units.find(text if units is s else utf16_units(text), max(int_argument(start), 0))


def _last_index_of(s: str, target: Any) -> int:
    text = text_argument(target, "the searched text")
    units = utf16_units(s)
    return units.rfind(text if units is s else utf16_units(text))


def char_at(s: str, i: Any) -> str:
    """A ``char``: a one-unit String (half of a surrogate pair, when ``i`` points there)."""
    units = utf16_units(s)
    check_bounds(int_argument(i), len(units), "String")
    return units[i]


def java_trim(s: str) -> str:
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
    regex = text_argument(pattern, "the split pattern")
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
    sep = text_argument(token, "the token")
    if not sep:
        raise Fault("IllegalArgumentException", "Cannot split on an empty token")
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    budget.charge(len(parts))
    return JArray(parts, "String")


def compare_to(a: Any, b: Any) -> int:
    if b is None:
        raise npe("compareTo(null)")
    if type(a) is str:
        b = utf16_units(text_argument(b, "the compared text"))   # Java compares UTF-16 units
        a = utf16_units(a)
        for x, y in zip(a, b):
            if x != y:
                return ord(x) - ord(y)
        return len(a) - len(b)
    if not is_number(b):
        raise Fault("ClassCastException", f"cannot compare [{type_name(a)}] to [{type_name(b)}]")
    return (a > b) - (a < b)


STRING_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("length", 0): lambda b, s: utf16_length(s),
    ("isEmpty", 0): lambda b, s: not s,
    ("isBlank", 0): lambda b, s: not s.strip(),
    ("contains", 1): lambda b, s, t: text_argument(t, "the searched text") in s,
    ("replace", 2): lambda b, s, x, y: b.string(s.replace(text_argument(x, "the replaced text"),
                                                          text_argument(y, "the replacement"))),
    ("substring", 1): lambda b, s, i: _substring(s, i),
    ("substring", 2): lambda b, s, i, j: _substring(s, i, j),
    ("indexOf", 1): lambda b, s, t: _index_of(s, t),
    ("indexOf", 2): lambda b, s, t, i: _index_of(s, t, i),
    ("lastIndexOf", 1): lambda b, s, t: _last_index_of(s, t),
    ("startsWith", 1): lambda b, s, t: s.startswith(text_argument(t, "the prefix")),
    ("endsWith", 1): lambda b, s, t: s.endswith(text_argument(t, "the suffix")),
    ("equalsIgnoreCase", 1): lambda b, s, t: type(t) is str and s.lower() == t.lower(),
    ("trim", 0): lambda b, s: java_trim(s),
    ("strip", 0): lambda b, s: s.strip(),
    ("toLowerCase", 0): lambda b, s: s.lower(),
    ("toUpperCase", 0): lambda b, s: s.upper(),
    ("charAt", 1): lambda b, s, i: char_at(s, i),
    ("concat", 1): lambda b, s, t: b.string(s + text_argument(t, "the concatenated text")),
    ("split", 1): lambda b, s, p: _split(s, p, b),
    ("splitOnToken", 1): lambda b, s, t: _split_on_token(s, t, b),
    ("compareTo", 1): lambda b, s, t: compare_to(s, t),
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
    index = int_argument(i)
    current = utf16_units(sb.text())
    if not 0 <= index <= len(current):
        raise Fault("StringIndexOutOfBoundsException", f"offset {index}, length {len(current)}")
    return _edit(budget, sb, current[:index] + utf16_units(budget.text_of(value)) + current[index:])


def _set_length(budget: Budget, sb: JStringBuilder, n: Any) -> None:
    size = int_argument(n)
    if size < 0:
        raise Fault("StringIndexOutOfBoundsException", f"length {size}")
    current = utf16_units(sb.text())
    _edit(budget, sb, current[:size] + "\0" * max(0, size - len(current)))


def _delete_char_at(budget: Budget, sb: JStringBuilder, i: Any) -> JStringBuilder:
    index = int_argument(i)
    current = utf16_units(sb.text())
    check_bounds(index, len(current), "String")
    return _edit(budget, sb, current[:index] + current[index + 1:])


def _reverse(budget: Budget, sb: JStringBuilder) -> JStringBuilder:
    # Java reverses the units, then puts each surrogate pair back in order: a character
    # past U+FFFF (one code point here) stays whole; lone surrogates may pair anew.
    return _edit(budget, sb, utf16_units(sb.text()[::-1]))


BUILDER_METHODS: dict[tuple[str, int], Callable[..., Any]] = {
    ("append", 1): _append,
    ("length", 0): lambda b, sb: sb.units(),
    ("toString", 0): lambda b, sb: (b.charge(sb.length), sb.text())[1],
    ("insert", 2): _insert,
    ("setLength", 1): _set_length,
    ("charAt", 1): lambda b, sb, i: char_at(sb.text(), i),
    ("deleteCharAt", 1): _delete_char_at,
    ("reverse", 0): _reverse,
    ("isEmpty", 0): lambda b, sb: sb.length == 0,
}
