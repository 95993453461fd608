"""Java regular expressions on Python's ``re``: translate a ``java.util.regex`` pattern,
then match it as ``Matcher.matches()`` does (the whole text: ``fullmatch``).

ml-commons' guardrails compile their ``regex`` and ``response_validation_regex`` with
``Pattern.compile`` and test them with ``matches()``. The two engines agree on most of
the syntax but not on its meaning at the edges, so nothing is passed through as it is:
every atom is written out in Python terms.

    Java                          Python written here
    .                             [^\\n\\r\\x85\\u2028\\u2029] (every Java line terminator),
                                  [^\\n] under (?d), any character under (?s)
    ^  $  (and under (?m))        lookarounds on Java's line terminators (\\n only under (?d))
    \\w \\d \\s \\b \\W \\D \\S \\B   ASCII, as Java's defaults (Python's are Unicode); (?U) makes
                                  them Python's Unicode ones
    \\h \\H \\v \\V \\R               Java's horizontal / vertical whitespace, line break
    \\z  \\Z  \\G                   \\Z, "before a final line terminator", \\A (matches() starts at 0)
    \\Q...\\E  \\x{h..h} \\0oct \\cX \\e \\a \\N{name} \\uXXXX (surrogate pairs joined)
                                  the characters they stand for
    \\p{Lower} ... \\p{XDigit}     the POSIX classes (US-ASCII, as Java's defaults)
    (?i)                          ASCII-only case folding (Java's default); (?iu) Unicode
    (?x)                          whitespace and # comments dropped, inside classes too
    (?flags) mid-group            applies to the rest of its group, as in Java
    (?<name>...)  \\k<name>        (?P<name>...)  (?P=name)
    possessive, atomic (?>...)    as they are (Python 3.11 has both)

Refused with a 400, since Python cannot do what Java would: class intersection and union
(``[a-z&&[^b]]``, ``[a[b]]``), Unicode properties and scripts (``\\p{L}``,
``\\p{IsLatin}``, ``\\p{javaLowerCase}``), ``\\X``, ``\\b{g}``, ``(?c)``; and what Java
itself refuses (an unknown escape, a ``{`` that is not a quantifier). A lookbehind must
have a fixed width in Python (Java takes a bounded one): Python's refusal is the 400.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ..errors import BadRequest

MAX_CODE_POINT = 0x10FFFF
_LINE_TERMINATORS = "\n\r\x85\u2028\u2029"
_FLAG_LETTERS = frozenset("idmsuxU")

Ranges = tuple[tuple[int, int], ...]

_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20))  # [ \t\n\x0B\f\r]
_HSPACE: Ranges = ((0x09, 0x09), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x180E, 0x180E),
                   (0x2000, 0x200A), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000))
_VSPACE: Ranges = ((0x0A, 0x0D), (0x85, 0x85), (0x2028, 0x2029))
_POSIX: dict[str, Ranges] = {
    "Lower": ((0x61, 0x7A),), "Upper": ((0x41, 0x5A),), "ASCII": ((0x00, 0x7F),),
    "Alpha": ((0x41, 0x5A), (0x61, 0x7A)), "Digit": _DIGIT,
    "Alnum": ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)),
    "Punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    "Graph": ((0x21, 0x7E),), "Print": ((0x20, 0x7E),), "Blank": ((0x09, 0x09), (0x20, 0x20)),
    "Cntrl": ((0x00, 0x1F), (0x7F, 0x7F)), "XDigit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
    "Space": _SPACE,
}
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "a": "\x07", "e": "\x1b"}


@dataclass(frozen=True, slots=True)
class JavaPattern:
    """A Java pattern and its Python translation, compiled."""

    source: str
    compiled: re.Pattern[str]

    def matches(self, text: str) -> bool:
        """``Matcher.matches()``: the pattern matches the whole text."""
        return self.compiled.fullmatch(text) is not None


def compile_java(pattern: str) -> JavaPattern:
    """The Java pattern, translated and compiled; a 400 naming the problem when it cannot be."""
    if not isinstance(pattern, str):
        raise BadRequest(f"a regex must be a string, got {type(pattern).__name__}")
    translated = translate(pattern)
    try:
        return JavaPattern(pattern, re.compile(translated))
    except (re.error, RecursionError, OverflowError) as exc:
        raise BadRequest(f"the regex [{pattern}] cannot be used: {exc}") from None


def translate(pattern: str) -> str:
    """The Python ``re`` pattern that means what the Java pattern means."""
    return _Translator(pattern).run()


def _refuse(pattern: str, why: str) -> BadRequest:
    return BadRequest(f"the regex [{pattern}] cannot be used: {why}")


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.pos = 0
        self.out: list[str] = []
        self.flags: list[frozenset[str]] = [frozenset()]  # one entry per open group
        self.groups = 0

    # --- the pattern ---------------------------------------------------------------

    def run(self) -> str:
        while self.pos < len(self.src):
            if self._skip_comments():
                continue
            c = self.src[self.pos]
            self.pos += 1
            if c == "\\":
                self.out.append(self._escape())
            elif c == "[":
                self.out.append(self._class())
            elif c == "(":
                self.out.append(self._open_group())
            elif c == ")":
                if len(self.flags) == 1:
                    raise _refuse(self.src, "unmatched closing ')'")
                self.flags.pop()
                self.out.append(")")
            elif c == ".":
                self.out.append(self._dot())
            elif c == "^":
                self.out.append(self._caret())
            elif c == "$":
                self.out.append(self._dollar())
            elif c == "{":
                self.out.append(self._repetition())
            elif c in "*+?|":
                self.out.append(c)
            else:
                self.out.append(self._literal(c))
        if len(self.flags) != 1:
            raise _refuse(self.src, "unclosed group")
        return "".join(self.out)

    @property
    def _flags(self) -> frozenset[str]:
        return self.flags[-1]

    def _skip_comments(self) -> bool:
        """Under (?x): skip whitespace and a # comment; True when something was skipped."""
        if "x" not in self._flags or self.pos >= len(self.src):
            return False
        c = self.src[self.pos]
        if c in " \t\n\x0b\f\r":
            self.pos += 1
            return True
        if c == "#":
            end = self.src.find("\n", self.pos)
            self.pos = len(self.src) if end < 0 else end + 1
            return True
        return False

    def _open_group(self) -> str:
        parent = self._flags
        if not self.src.startswith("?", self.pos):
            self.groups += 1
            self.flags.append(parent)
            return "("
        self.pos += 1
        for opener in (":", "=", "!", "<=", "<!", ">"):
            if self.src.startswith(opener, self.pos):
                self.pos += len(opener)
                self.flags.append(parent)
                return "(?" + opener
        if self.src.startswith("<", self.pos):
            name = self._name(">")
            self.groups += 1
            self.flags.append(parent)
            return f"(?P<{name}>"
        on, off, end = self._flag_letters()
        changed = (parent | on) - off
        if end == ")":  # (?i): the rest of the enclosing group
            self.flags[-1] = changed
            return "(?:)"
        self.flags.append(changed)
        return "(?:"

    def _flag_letters(self) -> tuple[set[str], set[str], str]:
        on: set[str] = set()
        off: set[str] = set()
        target = on
        while self.pos < len(self.src):
            c = self.src[self.pos]
            self.pos += 1
            if c in ":)":
                return on, off, c
            if c == "-" and target is on:
                target = off
            elif c in _FLAG_LETTERS:
                target.add(c)
            else:
                raise _refuse(self.src, f"unknown inline flag or group construct (?{c}")
        raise _refuse(self.src, "unclosed group")

    def _name(self, close: str) -> str:
        self.pos += 1  # the opening <
        end = self.src.find(close, self.pos)
        name = self.src[self.pos:end] if end >= 0 else ""
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
            raise _refuse(self.src, "a group name is a letter followed by letters and digits")
        self.pos = end + 1
        return name

    def _repetition(self) -> str:
        found = re.compile(r"(\d+)(,(\d*))?\}").match(self.src, self.pos)
        if found is None:
            raise _refuse(self.src, "'{' that is not a repetition {n}, {n,} or {n,m} (Java's 'Illegal repetition')")
        self.pos = found.end()
        return "{" + found.group(0)

    # --- atoms -----------------------------------------------------------------------

    def _literal(self, c: str) -> str:
        flags = self._flags
        if "i" in flags and c.lower() != c.upper():
            if "u" in flags:
                return f"(?i:{re.escape(c)})"
            if c.isascii():
                return f"[{c.lower()}{c.upper()}]"
        return re.escape(c)

    def _dot(self) -> str:
        flags = self._flags
        if "s" in flags:
            return "(?s:.)"
        return "[^\\n]" if "d" in flags else "[^\\n\\r\\x85\\u2028\\u2029]"

    def _terminators(self) -> str:
        return "\\n" if "d" in self._flags else "\\n\\r\\x85\\u2028\\u2029"

    def _caret(self) -> str:
        if "m" not in self._flags:
            return "\\A"
        if "d" in self._flags:
            return "(?:\\A|(?<=\\n)(?!\\Z))"
        # after any line terminator but at the end, and never between \r and \n
        return "(?:\\A|(?<=[\\n\\x85\\u2028\\u2029])(?!\\Z)|(?<=\\r)(?![\\n]|\\Z))"

    def _dollar(self) -> str:
        terminators = self._terminators()
        if "m" in self._flags:
            return f"(?=[{terminators}]|\\Z)"
        if "d" in self._flags:
            return "(?=\\n?\\Z)"
        return f"(?=(?:\\r\\n|[{terminators}])?\\Z)"

    def _escape(self) -> str:
        if self.pos >= len(self.src):
            raise _refuse(self.src, "a trailing backslash")
        c = self.src[self.pos]
        self.pos += 1
        flags = self._flags
        if c == "Q":
            return "".join(self._literal(q) for q in self._quoted())
        if c in "123456789":
            return self._backreference(int(c))
        if c == "k":
            if not self.src.startswith("<", self.pos):
                raise _refuse(self.src, "\\k needs a <name>")
            reference = f"(?P={self._name('>')})"
            return f"(?i:{reference})" if "i" in flags else reference
        if c in "dDwWsShHvV" or c in "pP":
            ranges, raw = self._predefined(c)
            if raw is not None:
                return raw
            return _class_text(ranges, negated=False)
        if c in "bB":
            if self.src.startswith("{", self.pos):
                raise _refuse(self.src, "\\b{g} grapheme boundaries are not supported")
            if "U" in flags:
                return "\\" + c
            word = "[0-9A-Z_a-z]"
            if c == "b":
                return f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))"
            return f"(?:(?<={word})(?={word})|(?<!{word})(?!{word}))"
        if c == "R":
            return "(?:\\r\\n|[\\n\\x0b\\f\\r\\x85\\u2028\\u2029])"
        if c in "AG":
            return "\\A"
        if c == "z":
            return "\\Z"
        if c == "Z":
            return "(?=\\n?\\Z)" if "d" in flags else "(?=(?:\\r\\n|[\\n\\r\\x85\\u2028\\u2029])?\\Z)"
        if c in "X":
            raise _refuse(self.src, "\\X (grapheme clusters) is not supported")
        return self._literal(self._character(c))

    def _quoted(self) -> str:
        end = self.src.find("\\E", self.pos)
        text = self.src[self.pos:] if end < 0 else self.src[self.pos:end]
        self.pos = len(self.src) if end < 0 else end + 2
        return text

    def _backreference(self, number: int) -> str:
        # As Java: take more digits while the number still names a group seen so far.
        while self.pos < len(self.src) and self.src[self.pos].isdigit():
            longer = number * 10 + int(self.src[self.pos])
            if longer > self.groups:
                break
            number, self.pos = longer, self.pos + 1
        if number > self.groups:
            raise _refuse(self.src, f"back reference \\{number} names no group before it")
        reference = f"(?:\\{number})"
        return f"(?i:{reference})" if "i" in self._flags else reference

    def _character(self, c: str) -> str:
        """The one character an escape (after its backslash) stands for."""
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "0":
            found = re.compile(r"[0-3][0-7]{2}|[0-7]{1,2}").match(self.src, self.pos)
            if found is None:
                raise _refuse(self.src, "\\0 must be followed by an octal value")
            self.pos = found.end()
            return chr(int(found.group(0), 8))
        if c == "x":
            found = re.compile(r"\{([0-9a-fA-F]+)\}|[0-9a-fA-F]{2}").match(self.src, self.pos)
            if found is None:
                raise _refuse(self.src, "\\x needs two hex digits or {hex}")
            self.pos = found.end()
            value = int(found.group(1) or found.group(0), 16)
            if value > MAX_CODE_POINT:
                raise _refuse(self.src, "a hexadecimal code point above U+10FFFF")
            return chr(value)
        if c == "u":
            value = self._hex4()
            if 0xD800 <= value < 0xDC00 and self.src.startswith("\\u", self.pos):
                saved = self.pos
                self.pos += 2
                low = self._hex4()
                if 0xDC00 <= low < 0xE000:
                    return chr(0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00))
                self.pos = saved
            return chr(value)
        if c == "c":
            if self.pos >= len(self.src):
                raise _refuse(self.src, "\\c needs a control letter")
            self.pos += 1
            return chr(ord(self.src[self.pos - 1]) ^ 64)
        if c == "N":
            end = self.src.find("}", self.pos)
            if not self.src.startswith("{", self.pos) or end < 0:
                raise _refuse(self.src, "\\N needs a {character name}")
            name, self.pos = self.src[self.pos + 1:end], end + 1
            try:
                return unicodedata.lookup(name)
            except KeyError:
                raise _refuse(self.src, f"unknown character name {name}") from None
        if c.isascii() and c.isalnum():
            raise _refuse(self.src, f"illegal or unsupported escape sequence \\{c}")
        return c

    def _hex4(self) -> int:
        digits = self.src[self.pos:self.pos + 4]
        if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
            raise _refuse(self.src, "\\u needs four hex digits")
        self.pos += 4
        return int(digits, 16)

    def _predefined(self, c: str) -> tuple[Ranges, str | None]:
        """A predefined or POSIX class: its ranges, or Python's own class text under (?U)."""
        negated = c.isupper()
        if c in "pP":
            ranges = self._property()
        elif c in "dDwWsS" and "U" in self._flags:
            return (), "\\" + c
        else:
            ranges = {"d": _DIGIT, "w": _WORD, "s": _SPACE, "h": _HSPACE, "v": _VSPACE}[c.lower()]
        return (_complement(ranges) if negated else ranges), None

    def _property(self) -> Ranges:
        if self.src.startswith("{", self.pos):
            end = self.src.find("}", self.pos)
            if end < 0:
                raise _refuse(self.src, "unclosed \\p{...}")
            name, self.pos = self.src[self.pos + 1:end], end + 1
        elif self.pos < len(self.src):
            name, self.pos = self.src[self.pos], self.pos + 1
        else:
            raise _refuse(self.src, "\\p needs a property name")
        posix = name[2:] if name.startswith("Is") and name[2:] in _POSIX else name
        if posix in _POSIX and "U" not in self._flags:
            return _POSIX[posix]
        raise _refuse(self.src, f"the property \\p{{{name}}} is not supported: mlstream's regex engine "
                                "(Python's re) has no Unicode properties; the POSIX classes (Lower, Upper, "
                                "Alpha, Digit, Alnum, Punct, Space, ...) are supported")

    # --- character classes -------------------------------------------------------------

    def _class(self) -> str:
        negated = self.src.startswith("^", self.pos)
        if negated:
            self.pos += 1
        if self.src.startswith("]", self.pos):
            raise _refuse(self.src, "a ']' first in a character class: write \\] for a literal ]")
        items: list[tuple[int, int]] = []
        raw: list[str] = []
        while True:
            if self._skip_comments():
                continue
            if self.pos >= len(self.src):
                raise _refuse(self.src, "unclosed character class")
            c = self.src[self.pos]
            if c == "]":
                self.pos += 1
                break
            if c == "[":
                raise _refuse(self.src, "nested character classes (Java's class union) are not supported")
            if self.src.startswith("&&", self.pos):
                raise _refuse(self.src, "character class intersection (&&) is not supported")
            low = self._class_atom(items, raw)
            if low is None:
                continue
            if self.src.startswith("-", self.pos) and not self.src.startswith("-]", self.pos):
                self.pos += 1
                if self.pos >= len(self.src):  # "[a-": the range and the class both unfinished
                    raise _refuse(self.src, "unclosed character class")
                high = self._class_atom(items, raw)
                if high is None:
                    raise _refuse(self.src, "a range in a character class must end at a single character")
                if high < low:
                    raise _refuse(self.src, f"illegal character range {chr(low)!r}-{chr(high)!r}")
                items.append((low, high))
            else:
                items.append((low, low))
        return self._class_text(items, raw, negated)

    def _class_atom(self, items: list[tuple[int, int]], raw: list[str]) -> int | None:
        """One class member: a character's code point, or None when it was a set (added)."""
        c = self.src[self.pos]
        self.pos += 1
        if c != "\\":
            return ord(c)
        if self.pos >= len(self.src):
            raise _refuse(self.src, "a trailing backslash")
        e = self.src[self.pos]
        self.pos += 1
        if e in "dDwWsShHvVpP":
            ranges, text = self._predefined(e)
            if text is not None:
                raw.append(text)
            items.extend(ranges)
            return None
        if e == "Q":
            quoted = self._quoted()
            items.extend((ord(q), ord(q)) for q in quoted[:-1])
            return ord(quoted[-1]) if quoted else None
        if e in "bBRXAGzZk123456789":
            raise _refuse(self.src, f"\\{e} cannot be used in a character class")
        return ord(self._character(e))

    def _class_text(self, items: list[tuple[int, int]], raw: list[str], negated: bool) -> str:
        flags = self._flags
        if "i" in flags and "u" not in flags:
            items = items + _ascii_case_swapped(items)
        text = _class_text(tuple(items), negated, raw)
        return f"(?i:{text})" if "i" in flags and "u" in flags else text


def _merge(ranges: Ranges | list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _complement(ranges: Ranges) -> Ranges:
    result, start = [], 0
    for low, high in _merge(ranges):
        if low > start:
            result.append((start, low - 1))
        start = high + 1
    if start <= MAX_CODE_POINT:
        result.append((start, MAX_CODE_POINT))
    return tuple(result)


def _ascii_case_swapped(items: list[tuple[int, int]]) -> list[tuple[int, int]]:
    swapped = []
    for low, high in items:
        for base, other in ((0x41, 0x61), (0x61, 0x41)):  # A-Z <-> a-z
            start, end = max(low, base), min(high, base + 25)
            if start <= end:
                swapped.append((start - base + other, end - base + other))
    return swapped


def _class_char(code: int) -> str:
    c = chr(code)
    return c if c.isascii() and c.isalnum() else f"\\U{code:08x}"


def _class_text(ranges: Ranges, negated: bool, raw: list[str] | None = None) -> str:
    parts = [_class_char(low) if low == high else f"{_class_char(low)}-{_class_char(high)}"
             for low, high in _merge(ranges)]
    body = "".join(parts) + "".join(raw or ())
    if not body:  # a set that holds nothing (e.g. [^\x00-\x{10FFFF}]) or everything
        return "[\\s\\S]" if negated else "(?!)"
    return f"[{'^' if negated else ''}{body}]"
