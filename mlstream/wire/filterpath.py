"""OpenSearch's ``filter_path`` response filter, pure: parse the expression once, apply it
to a JSON value.

    selection = parse_filter_path("hits.hits._id,-hits.hits._source.credential")
    filtered = selection.apply(body)

An expression is a comma-separated list of dotted paths. A segment may hold ``*``
wildcards (matching within one field name); a ``**`` segment matches any number of
levels, none included. Array indices are not part of a path: a path reaches through
arrays into each element. A path starting with ``-`` excludes what it matches.

As OpenSearch does: exclusions are applied first, then inclusions keep only what some
inclusion matches, with its whole subtree; an object or array left empty because
nothing under it was included is dropped (when nothing matches, the answer is ``{}``).
An object emptied by exclusions stays, empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest

# A filter_path is typed by a person; hundreds of paths or levels are a mistake or an attack.
MAX_PATHS = 100
MAX_SEGMENTS = 64

_ANY_LEVELS = "**"
Pattern = tuple[str, ...]
_DROPPED = object()  # an included-nothing marker, distinct from a JSON null


@dataclass(frozen=True, slots=True)
class FilterPath:
    """A parsed ``filter_path``: the inclusion and exclusion paths, each a tuple of segments."""

    includes: tuple[Pattern, ...]
    excludes: tuple[Pattern, ...]

    def apply(self, value: Any) -> Any:
        """``value`` filtered; only objects and arrays are filtered, anything else is kept."""
        if not isinstance(value, (dict, list)):
            return value
        if self.excludes:
            value = _exclude(value, self.excludes)
        if self.includes:
            value = _include(value, self.includes)
            if value is _DROPPED:
                return {}
        return value


def parse_filter_path(expression: str) -> FilterPath:
    includes: list[Pattern] = []
    excludes: list[Pattern] = []
    paths = [path.strip() for path in expression.split(",") if path.strip()]
    if len(paths) > MAX_PATHS:
        raise BadRequest(f"[filter_path] has more than {MAX_PATHS} paths")
    for path in paths:
        target = includes
        if path.startswith("-"):
            target, path = excludes, path[1:]
        segments = tuple(path.split("."))
        if len(segments) > MAX_SEGMENTS or not all(segments):
            raise BadRequest(f"[filter_path] has an invalid path [{path}]")
        target.append(segments)
    return FilterPath(tuple(includes), tuple(excludes))


def _segment_matches(segment: str, key: str) -> bool:
    """``*`` matches any run of characters (OpenSearch's Glob.globMatch); by ordered
    substring search, linear in the key: a regex of many ``.*`` would backtrack for
    seconds on a crafted segment."""
    if "*" not in segment:
        return segment == key
    parts = segment.split("*")
    first, last = parts[0], parts[-1]
    if len(key) < len(first) + len(last) or not key.startswith(first) or not key.endswith(last):
        return False
    position, end = len(first), len(key) - len(last)
    for part in parts[1:-1]:
        found = key.find(part, position, end)
        if found < 0:
            return False
        position = found + len(part)
    return True


def _step(patterns: tuple[Pattern, ...], key: str) -> tuple[bool, tuple[Pattern, ...]]:
    """Whether some pattern ends at ``key``, and the patterns left for ``key``'s children."""
    matched = False
    rest: list[Pattern] = []
    pending = list(patterns)
    while pending:
        pattern = pending.pop()
        head = pattern[0]
        if head == _ANY_LEVELS:
            if len(pattern) == 1:
                matched = True  # "**" at the end takes everything below
                continue
            rest.append(pattern)        # "**" swallows this key and stays
            pending.append(pattern[1:])  # or swallows no level at all
            continue
        if _segment_matches(head, key):
            if len(pattern) == 1:
                matched = True
            else:
                rest.append(pattern[1:])
    return matched, tuple(dict.fromkeys(rest))


def _include(value: Any, patterns: tuple[Pattern, ...]) -> Any:
    if isinstance(value, list):
        kept = [item for item in (_include(element, patterns) for element in value) if item is not _DROPPED]
        return kept if kept else _DROPPED
    if not isinstance(value, dict):
        return _DROPPED  # a leaf reached with path left over: not included
    kept_fields: dict[str, Any] = {}
    for key, child in value.items():
        matched, rest = _step(patterns, key)
        if matched:
            kept_fields[key] = child
        elif rest:
            filtered = _include(child, rest)
            if filtered is not _DROPPED:
                kept_fields[key] = filtered
    return kept_fields if kept_fields else _DROPPED


def _exclude(value: Any, patterns: tuple[Pattern, ...]) -> Any:
    if isinstance(value, list):
        return [_exclude(element, patterns) for element in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, child in value.items():
        matched, rest = _step(patterns, key)
        if matched:
            continue
        kept[key] = _exclude(child, rest) if rest else child
    return kept
