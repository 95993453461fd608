"""Painless tokens, after OpenSearch's ``modules/lang-painless/src/main/antlr/PainlessLexer.g4``.

Pure. Differences on purpose: a ``//`` comment may end the text without a newline, and
space is allowed after a ``.``; a regex literal (a ``/`` where a value is expected, the
grammar's ``isSlashRegex``) is refused as an unsupported construct.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScriptError

__all__ = ["KEYWORDS", "TYPES", "Token", "tokenize"]

KEYWORDS = frozenset({"if", "in", "else", "while", "do", "for", "continue", "break", "return", "new",
                      "try", "catch", "throw", "this", "instanceof", "true", "false", "null"})
PRIMITIVES = frozenset({"boolean", "byte", "short", "char", "int", "long", "float", "double"})
# Names the lexer reads as types (Painless' lexer asks its whitelist the same question):
# everything a script may name. A class outside this set is an unknown variable.
TYPES = PRIMITIVES | {"def", "String", "Object", "Integer", "Long", "Double", "Float", "Boolean", "Number",
                      "Character", "Byte", "Short", "CharSequence", "List", "ArrayList", "Map", "HashMap",
                      "LinkedHashMap", "Collection", "StringBuilder", "Math", "BigDecimal", "Exception",
                      "RuntimeException", "IllegalArgumentException", "IllegalStateException", "void"}

# Longest first, so that ">>>=" wins over ">>" and "?." over "?".
_OPERATORS = sorted(["{", "}", "[", "]", "(", ")", "?.", ",", ";", "!", "~", "*", "/", "%", "+", "-",
                     "<<", ">>", ">>>", "<", "<=", ">", ">=", "==", "===", "!=", "!==", "&", "^", "|",
                     "&&", "||", "?", ":", "?:", "::", "->", "=~", "==~", "++", "--", "=", "+=", "-=",
                     "*=", "/=", "%=", "&=", "^=", "|=", "<<=", ">>=", ">>>=", "."], key=len, reverse=True)
_DIGITS = "0123456789"
_ID_START = "_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ID_PART = _ID_START + _DIGITS


@dataclass(frozen=True, slots=True)
class Token:
    kind: str    # "id", "type", "keyword", "int", "decimal", "string", "op", "dotid", "dotint", "eof"
    text: str    # for "string": the value, escapes resolved
    line: int
    column: int


def _error(line: int, column: int, message: str) -> ScriptError:
    return ScriptError(f"Painless syntax error at line {line}, column {column}: {message}")


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    i, line, line_start, n = 0, 1, 0, len(source)
    after_dot = False
    while True:
        # whitespace and comments
        while i < n:
            c = source[i]
            if c in " \t\r\n":
                if c == "\n":
                    line, line_start = line + 1, i + 1
                i += 1
            elif source.startswith("//", i):
                while i < n and source[i] not in "\r\n":
                    i += 1
            elif source.startswith("/*", i):
                end = source.find("*/", i + 2)
                if end < 0:
                    raise _error(line, i - line_start + 1, "unterminated comment /* ... */")
                line += source.count("\n", i, end)
                if "\n" in source[i:end]:
                    line_start = source.rfind("\n", i, end) + 1
                i = end + 2
            else:
                break
        column = i - line_start + 1
        if i >= n:
            tokens.append(Token("eof", "", line, column))
            return tokens
        c = source[i]
        if after_dot:
            after_dot = False
            if c in _DIGITS:
                j = i + 1 if c == "0" else _skip(source, i, _DIGITS)
                tokens.append(Token("dotint", source[i:j], line, column))
                i = j
                continue
            if c in _ID_START:
                j = _skip(source, i, _ID_PART)
                tokens.append(Token("dotid", source[i:j], line, column))
                i = j
                continue
            raise _error(line, column, f"expected a name after '.', found {source[i]!r}")
        if c in _ID_START:
            j = _skip(source, i, _ID_PART)
            word = source[i:j]
            kind = "keyword" if word in KEYWORDS else "type" if word in TYPES else "id"
            tokens.append(Token(kind, word, line, column))
            i = j
        elif c in _DIGITS:
            i = _number(source, i, line, column, tokens)
        elif c in "\"'":
            i, line, line_start = _string(source, i, line, line_start, column, tokens)
        else:
            op = next((op for op in _OPERATORS if source.startswith(op, i)), None)
            if op == "/" and not source.startswith("/=", i) and not _ends_value(tokens):
                # where a value is expected, Painless reads '/' as the start of a regex
                raise ScriptError(f"Painless construct not supported at line {line}, column {column}: "
                                  "regex literal")
            if op is None:
                raise _error(line, column, f"unexpected character {c!r}")
            tokens.append(Token("op", op, line, column))
            i += len(op)
            after_dot = op in (".", "?.")


def _ends_value(tokens: list[Token]) -> bool:
    if not tokens:
        return False
    last = tokens[-1]
    if last.kind == "op":
        return last.text in (")", "]", "++", "--")
    return last.kind != "keyword" or last.text in ("true", "false", "null", "this")


def _skip(source: str, i: int, allowed: str) -> int:
    n = len(source)
    while i < n and source[i] in allowed:
        i += 1
    return i


def _number(source: str, i: int, line: int, column: int, tokens: list[Token]) -> int:
    start, n = i, len(source)
    if source.startswith(("0x", "0X"), i):
        j = _skip(source, i + 2, _DIGITS + "abcdefABCDEF")
        if j == i + 2:
            raise _error(line, column, "a hexadecimal number needs digits after 0x")
        if j < n and source[j] in "lL":
            j += 1
        tokens.append(Token("int", source[start:j], line, column))
        return j
    j = _skip(source, i, _DIGITS)
    decimal = False
    if j + 1 < n and source[j] == "." and source[j + 1] in _DIGITS:
        j, decimal = _skip(source, j + 1, _DIGITS), True
    if j < n and source[j] in "eE":
        k = j + 1
        if k < n and source[k] in "+-":
            k += 1
        if k < n and source[k] in _DIGITS:
            j, decimal = _skip(source, k, _DIGITS), True
    if j < n and source[j] in "fFdD":
        j, decimal = j + 1, True
    elif not decimal and j < n and source[j] in "lL":
        j += 1
    if j < n and source[j] in _ID_PART:
        raise _error(line, column, f"malformed number {source[start:j + 1]!r}")
    tokens.append(Token("decimal" if decimal else "int", source[start:j], line, column))
    return j


def _string(source: str, i: int, line: int, line_start: int, column: int,
            tokens: list[Token]) -> tuple[int, int, int]:
    quote, n = source[i], len(source)
    parts: list[str] = []
    j = i + 1
    while True:
        if j >= n:
            raise _error(line, column, "unterminated string literal")
        c = source[j]
        if c == quote:
            break
        if c == "\\":
            nxt = source[j + 1] if j + 1 < n else ""
            if nxt not in (quote, "\\"):
                # Painless has two escapes only: the quote and the backslash.
                raise _error(line, column, f"invalid escape '\\{nxt}' in a string literal "
                                           f"(Painless knows only \\{quote} and \\\\)")
            parts.append(nxt)
            j += 2
            continue
        if c == "\n":
            line, line_start = line + 1, j + 1
        parts.append(c)
        j += 1
    tokens.append(Token("string", "".join(parts), line, column))
    return j + 1, line, line_start
