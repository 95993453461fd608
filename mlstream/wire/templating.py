"""Connector templates: fill ``${parameters.NAME}`` / ``${credential.KEY}`` placeholders.

The ``url``, the ``headers`` values and the ``request_body`` of a connector
action are templates in ml-commons' syntax:

    ${parameters.NAME}             the value; a str as is, anything else as compact JSON
    ${parameters.NAME.toString()}  the value escaped for use inside a JSON string literal
    ${parameters.NAME:-DEFAULT}    DEFAULT (as text) when NAME is absent or None
    "${parameters.NAME:-null}"     with its quotes: bare null when NAME is absent or None
    ${credential.KEY}              a credential value, same forms as above

A template is compiled once (cached) into literal and placeholder parts, so
rendering is one pass over the parts and a join.

A parameter *value* that itself holds ``${parameters.x}`` placeholders has them
filled too, recursively, as ml-commons' ``StringSubstitutor`` does (a connector's
``"api": "Comprehend_${parameters.api_version}.${parameters.api_name}"`` used in a
header); a value that refers back to itself is an error. Inside values only
``${parameters.`` placeholders count: a value is never a way to reach a credential.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TemplateError
from ..speedups import orjson

__all__ = ["render", "render_json_body", "placeholders"]

# The non-greedy name lets ".toString()" be taken as a suffix rather than as
# part of the name; DEFAULT runs to the first "}" (ml-commons has no nesting).
_PLACEHOLDER = re.compile(
    r"\$\{(?P<kind>parameters|credential)\."
    r"(?P<name>[A-Za-z0-9_.\-]+?)"
    r"(?P<to_string>\.toString\(\))?"
    r"(?::-(?P<default>[^}]*))?"
    r"\}"
)
# Starts like a placeholder and closes on the same line, but is not one (for
# example a space in the name). Failing loudly beats sending the literal text
# upstream. Quotes, braces and "$" stop the scan so that an unclosed "${" is
# never paired with a brace from later JSON structure.
_MALFORMED = re.compile(r"\$\{(?:parameters|credential)\.[^{}\"\n$]*\}")
_START = re.compile(r"\$\{(?:parameters|credential)\.")

# Compiled templates kept; connectors are few, so this holds every live
# template and bounds memory if templates arrive inline per request.
_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class _Placeholder:
    kind: str               # "parameters" | "credential"
    name: str
    to_string: bool
    default: str | None
    quoted_null: bool       # the '"${...:-null}"' form: the quotes are part of it
    text: str               # as written (without the quotes of the quoted-null form)


@dataclass(frozen=True, slots=True)
class _Malformed:
    text: str


_Part = str | _Placeholder | _Malformed


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(template: str) -> tuple[_Part, ...]:
    parts: list[_Part] = []
    pos = 0         # start of the literal text not yet emitted
    for start_match in _START.finditer(template):
        start = start_match.start()
        if start < pos:
            continue    # inside a placeholder already taken
        m = _PLACEHOLDER.match(template, start)
        if m is None:
            bad = _MALFORMED.match(template, start)
            if bad is None:
                continue    # never closes: stays literal text
            parts.append(template[pos:start])
            parts.append(_Malformed(bad.group()))
            pos = bad.end()
            continue
        end = m.end()
        default = m.group("default")
        quoted_null = (
            default == "null" and start - 1 >= pos
            and template[start - 1:start] == '"' and template[end:end + 1] == '"'
        )
        if quoted_null:
            parts.append(template[pos:start - 1])
            end += 1
        else:
            parts.append(template[pos:start])
        parts.append(_Placeholder(m.group("kind"), m.group("name"),
                                  m.group("to_string") is not None, default, quoted_null, m.group()))
        pos = end
    parts.append(template[pos:])
    return tuple(p for p in parts if p != "")


def _as_text(value: Any, part: _Placeholder) -> str:
    if isinstance(value, str):
        return value
    try:
        # allow_nan=False: NaN/Infinity are not JSON and would be sent as-is.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"Value of {part.kind}.{part.name} is not JSON") from exc


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


_NESTED_PREFIX = "${parameters."
# Nesting deeper than this is a cycle in all but name (ml-commons' substitutor fails on cycles).
_MAX_NESTING = 16
# Characters one render may write, nested values counted each time they are written: a
# value naming another 20 times, which names another 20 times... grows geometrically
# from a kilobyte of request, so the work is bounded, not only the depth. Far above any
# real body (the request body itself is bounded by --max-body-bytes).
MAX_RENDERED_CHARS = 64 * 1024 * 1024


def render(template: str, parameters: Mapping[str, Any], credential: Mapping[str, str],
           *, where: str, keep_missing: bool = False) -> str:
    """Fill every placeholder of ``template``.

    ``where`` ("url", "payload", "header Authorization", ...) only names the
    template in error reasons. Raises ``TemplateError`` naming every placeholder
    that could not be filled (sorted, comma-separated), or the first malformed
    one; a reason never contains a credential value.

    ``keep_missing``: a parameter placeholder with no value stays as written instead
    of failing (ml-commons' ``skip_validating_missing_parameters``); a missing
    credential still fails.
    """
    missing_params: set[str] = set()
    missing_creds: set[str] = set()
    text = _render(_compile(template), parameters, credential, where, missing_params,
                   missing_creds, (), [MAX_RENDERED_CHARS], keep_missing)
    if missing_params or missing_creds:
        reasons = []
        if missing_params:
            reasons.append(f"Some parameter placeholder not filled in {where}: "
                           + ", ".join(sorted(missing_params)))
        if missing_creds:
            reasons.append(f"Some credential placeholder not filled in {where}: "
                           + ", ".join(sorted(missing_creds)))
        raise TemplateError("; ".join(reasons))
    return text


def _render(parts: tuple[_Part, ...], parameters: Mapping[str, Any], credential: Mapping[str, str] | None,
            where: str, missing_params: set[str], missing_creds: set[str],
            chain: tuple[str, ...], budget: list[int], keep_missing: bool = False) -> str:
    """``credential`` None: the parts come from a parameter value (nested), where only
    parameter placeholders are filled and everything else stays as written. ``budget``:
    the characters still allowed (one cell shared by the nested renders)."""
    out: list[str] = []
    for part in parts:
        if type(part) is str:
            out.append(part)
            continue
        if type(part) is _Malformed:
            if credential is None:
                out.append(part.text)
                continue
            raise TemplateError(f"Malformed placeholder in {where}: {part.text}")
        if part.kind == "credential" and credential is None:
            out.append(f'"{part.text}"' if part.quoted_null else part.text)
            continue
        source = parameters if part.kind == "parameters" else credential
        value = source.get(part.name)
        if value is None and part.default is not None:
            # A None value counts as absent for the default, as in ml-commons
            # (its parameter map holds null for "not given").
            out.append("null" if part.quoted_null else part.default)
            continue
        if value is None and part.name not in source:
            if keep_missing and part.kind == "parameters":
                out.append(f'"{part.text}"' if part.quoted_null else part.text)
                continue
            (missing_params if part.kind == "parameters" else missing_creds).add(part.name)
            continue
        text = _as_text(value, part)
        if part.kind == "parameters" and _NESTED_PREFIX in text:
            if part.name in chain:
                raise TemplateError(f"Parameter {part.name} refers to itself in {where}: "
                                    + " -> ".join((*chain, part.name)))
            if len(chain) >= _MAX_NESTING:
                raise TemplateError(f"Parameters nest deeper than {_MAX_NESTING} levels in {where}")
            # Compiled without the cache: a value is request data, not a connector's template.
            text = _render(_compile.__wrapped__(text), parameters, None, where, missing_params, missing_creds,
                           (*chain, part.name), budget, keep_missing)
        budget[0] -= len(text)
        if budget[0] < 0:
            raise TemplateError(f"Parameters in {where} expand to more than {MAX_RENDERED_CHARS} characters")
        if part.to_string:
            text = _escape(text)
        out.append(f'"{text}"' if part.quoted_null else text)
    return "".join(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def render_json_body(template: str, parameters: Mapping[str, Any],
                     credential: Mapping[str, str], *, keep_missing: bool = False) -> str:
    """``render(where="payload")``, then check the result is strict JSON.

    NaN / Infinity are refused. The error reason gives only the JSON parser's
    message and position, never the rendered body (it may hold credentials).
    """
    body = render(template, parameters, credential, where="payload", keep_missing=keep_missing)
    # "from None": the JSONDecodeError holds the whole body (its .doc), which
    # may hold credentials, so it must not travel on as the cause.
    if orjson is not None:
        try:
            orjson.loads(body)  # strict: what it takes, the stdlib check below takes too
            return body
        except ValueError:
            pass  # the stdlib decides, and words the error
    try:
        json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise TemplateError(
            f"Invalid JSON in payload: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise TemplateError(f"Invalid JSON in payload: {exc}") from None
    return body


def placeholders(template: str) -> list[tuple[str, str]]:
    """The ``(kind, name)`` of each placeholder in order of appearance, repeats kept.

    ``kind`` is ``"parameters"`` or ``"credential"``. For validation when a
    connector is created: raises ``TemplateError`` on a malformed placeholder.
    """
    result: list[tuple[str, str]] = []
    for part in _compile(template):
        if type(part) is _Malformed:
            raise TemplateError(f"Malformed placeholder: {part.text}")
        if type(part) is _Placeholder:
            result.append((part.kind, part.name))
    return result
