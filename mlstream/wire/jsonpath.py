"""Response filters: the subset of Jayway JsonPath that ml-commons connectors use.

    $                 the document          .name  ['name']  ["name"]   a key
    [0]  [-1]         an index              [*]  .*                     every child
    ..name  ..*  ..[0]  recursive descent  [1:3]  [:2]  [-2:]          a slice (no step)
    ['a','b']  [0,1]  a union

A path without wildcard, recursive descent, slice or union is *definite*: it
names at most one value, and ``read`` returns it or raises ``PathNotFound``. Any
other path is *indefinite*: ``read`` returns the list of every match, in
document order, possibly empty. Filters (``[?(...)]``) and functions
(``.length()``) are not supported and are refused when compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import JsonPathError, PathNotFound

__all__ = ["JsonPath", "JsonPathError", "PathNotFound", "compile_path"]

# Compiled paths kept; response filters come from connectors and requests, a
# handful in practice, and this bounds memory if every request sends a new one.
_CACHE_SIZE = 1024

# Characters that end a name written after ".": the starts of the next step,
# and characters that would only appear in syntax we do not support.
_NAME_STOP = frozenset(".[]()'\"*?@ \t\r\n")


# No JSON array has an index of more digits (and int() refuses past 4300 digits).
MAX_INDEX_DIGITS = 32


@dataclass(frozen=True, slots=True)
class _Key:
    name: str


@dataclass(frozen=True, slots=True)
class _Index:
    index: int


@dataclass(frozen=True, slots=True)
class _Wildcard:
    pass


@dataclass(frozen=True, slots=True)
class _Slice:
    start: int | None
    stop: int | None


@dataclass(frozen=True, slots=True)
class _Union:
    selectors: tuple[_Key, ...] | tuple[_Index, ...]


@dataclass(frozen=True, slots=True)
class _Descent:
    selector: _Key | _Index | _Wildcard | _Slice | _Union


_Step = _Key | _Index | _Wildcard | _Slice | _Union | _Descent


@dataclass(frozen=True)
class JsonPath:
    """A compiled expression; build it with ``compile_path``."""

    expression: str
    is_definite: bool
    steps: tuple[_Step, ...] = field(repr=False, compare=False, default=())

    def read(self, document: Any) -> Any:
        """Definite: the value (``PathNotFound`` if absent). Indefinite: the list of matches."""
        if self.is_definite:
            node = document
            for step in self.steps:
                node = _definite_child(node, step, self.expression)
            return node
        nodes = [document]
        for step in self.steps:
            nodes = [child for node in nodes for child in _children(node, step)]
        return nodes


def _definite_child(node: Any, step: _Step, expression: str) -> Any:
    if type(step) is _Key:
        if isinstance(node, dict) and step.name in node:
            return node[step.name]
    elif isinstance(node, list):    # _Index: the only other definite step
        index = step.index
        if -len(node) <= index < len(node):
            return node[index]
    raise PathNotFound(f"No value at {expression}")


def _children(node: Any, step: _Step) -> Iterator[Any]:
    kind = type(step)
    if kind is _Key:
        if isinstance(node, dict) and step.name in node:
            yield node[step.name]
    elif kind is _Index:
        if isinstance(node, list) and -len(node) <= step.index < len(node):
            yield node[step.index]
    elif kind is _Wildcard:
        if isinstance(node, dict):
            yield from node.values()
        elif isinstance(node, list):
            yield from node
    elif kind is _Slice:
        if isinstance(node, list):
            yield from node[step.start:step.stop]
    elif kind is _Union:
        for selector in step.selectors:
            yield from _children(node, selector)
    else:   # _Descent: pre-order, the node itself first, as Jayway scans
        yield from _descend(node, step.selector)


def _descend(node: Any, selector: _Step) -> Iterator[Any]:
    yield from _children(node, selector)
    if isinstance(node, dict):
        for value in node.values():
            yield from _descend(value, selector)
    elif isinstance(node, list):
        for value in node:
            yield from _descend(value, selector)


class _Parser:
    """Recursive-descent over the expression text; ``pos`` is the next character."""

    def __init__(self, expression: str) -> None:
        self.text = expression
        self.pos = 0

    def error(self, why: str) -> JsonPathError:
        return JsonPathError(f"Invalid JSONPath '{self.text}': {why} at position {self.pos}")

    def parse(self) -> tuple[_Step, ...]:
        text = self.text
        if not text.startswith("$"):
            raise self.error("must start with '$'")
        self.pos = 1
        steps: list[_Step] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if text.startswith("..", self.pos):
                self.pos += 2
                if self.pos < len(text) and text[self.pos] == "[":
                    steps.append(_Descent(self.bracket()))
                else:
                    steps.append(_Descent(self.dot_member()))
            elif ch == ".":
                self.pos += 1
                steps.append(self.dot_member())
            elif ch == "[":
                steps.append(self.bracket())
            else:
                raise self.error(f"unexpected {ch!r}")
        return tuple(steps)

    def dot_member(self) -> _Key | _Wildcard:
        text = self.text
        if self.pos < len(text) and text[self.pos] == "*":
            self.pos += 1
            return _Wildcard()
        start = self.pos
        while self.pos < len(text) and text[self.pos] not in _NAME_STOP:
            self.pos += 1
        if self.pos == start:
            raise self.error("expected a name")
        if self.pos < len(text) and text[self.pos] == "(":
            raise self.error("functions are not supported")
        return _Key(text[start:self.pos])

    def bracket(self) -> _Key | _Index | _Wildcard | _Slice | _Union:
        self.pos += 1   # "["
        self.skip_spaces()
        if self.peek() == "*":
            self.pos += 1
            step: _Key | _Index | _Wildcard | _Slice | _Union = _Wildcard()
        elif self.peek() in ("'", '"'):
            keys = [self.quoted()]
            while self.comma():
                if self.peek() not in ("'", '"'):
                    raise self.error("expected a quoted name")
                keys.append(self.quoted())
            step = _Key(keys[0].name) if len(keys) == 1 else _Union(tuple(keys))
        elif self.peek() == "?":
            raise self.error("filters are not supported")
        else:
            first = self.integer(optional=True)
            self.skip_spaces()
            if self.peek() == ":":
                self.pos += 1
                stop = self.integer(optional=True)
                self.skip_spaces()
                if self.peek() == ":":
                    raise self.error("slice steps are not supported")
                step = _Slice(first, stop)
            else:
                if first is None:
                    raise self.error("expected an index, a quoted name, '*' or a slice")
                indices = [_Index(first)]
                while self.comma():
                    value = self.integer(optional=False)
                    assert value is not None
                    indices.append(_Index(value))
                step = indices[0] if len(indices) == 1 else _Union(tuple(indices))
        self.skip_spaces()
        if self.peek() != "]":
            raise self.error("expected ']'")
        self.pos += 1
        return step

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_spaces(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def comma(self) -> bool:
        self.skip_spaces()
        if self.peek() != ",":
            return False
        self.pos += 1
        self.skip_spaces()
        return True

    def quoted(self) -> _Key:
        quote = self.text[self.pos]
        self.pos += 1
        chars: list[str] = []
        while True:
            ch = self.peek()
            if ch == "":
                raise self.error("unterminated quoted name")
            self.pos += 1
            if ch == quote:
                return _Key("".join(chars))
            if ch == "\\":
                # A backslash takes the next character literally: \' \" \\.
                escaped = self.peek()
                if escaped == "":
                    raise self.error("unterminated quoted name")
                self.pos += 1
                chars.append(escaped)
            else:
                chars.append(ch)

    def integer(self, *, optional: bool) -> int | None:
        self.skip_spaces()
        start = self.pos
        if self.peek() == "-":
            self.pos += 1
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        digits = self.text[start:self.pos]
        if digits in ("", "-"):
            if optional and digits == "":
                return None
            raise self.error("expected an integer")
        if len(digits) > MAX_INDEX_DIGITS:
            raise self.error("index too long")
        return int(digits)


def _is_definite(steps: tuple[_Step, ...]) -> bool:
    return all(type(step) in (_Key, _Index) for step in steps)


def compile_path(expression: str) -> JsonPath:
    """Parse ``expression`` (surrounding whitespace ignored); ``JsonPathError`` if invalid.

    Compiled paths are cached, so calling this per request is cheap.
    """
    if not isinstance(expression, str):
        # Checked before the cache: a filter taken from request JSON may be a
        # list or object, which lru_cache cannot even hash.
        raise JsonPathError(f"Invalid JSONPath: expected a string, got {type(expression).__name__}")
    return _compile(expression.strip())


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(expression: str) -> JsonPath:
    steps = _Parser(expression).parse()
    return JsonPath(expression, _is_definite(steps), steps)
