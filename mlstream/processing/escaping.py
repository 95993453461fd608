"""Request parameters escaped so that ``"${parameters.x}"`` in a JSON template stays valid
JSON (``ml-algorithms/.../remote/ConnectorUtils.java``, ``escapeRemoteInferenceInputData``),
and the JSON-text test and escaping that it (and the script glue) is built on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

NO_ESCAPE_PARAMS = "no_escape_params"


def is_json_container(text: str) -> bool:
    """``StringUtils.isJson``: text that parses as a JSON object or array."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return False
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):  # nested past what a parser follows: not taken as JSON
        return False
    return True


def escape_json_text(text: str) -> str:
    """The text as it goes between the quotes of a JSON string (``"`` ``\\`` and controls
    escaped). ml-commons' escaper also writes ``/`` as ``\\/``: the same JSON value."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def escape_input_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``ConnectorUtils.escapeRemoteInferenceInputData``: each string parameter of a
    request (or of a pre-process function's output) JSON-escaped, so that
    ``"${parameters.x}"`` in a body stays valid JSON whatever ``x`` holds. JSON object or
    array text, non-strings and the names listed in ``no_escape_params`` are kept."""
    raw_names = parameters.get(NO_ESCAPE_PARAMS)
    keep = {n.strip() for n in raw_names.split(",")} if isinstance(raw_names, str) else set()
    escaped: dict[str, Any] = {}
    for name, value in parameters.items():
        if type(value) is str and name not in keep and _needs_escape(value) and not is_json_container(value):
            value = escape_json_text(value)
        escaped[name] = value
    return escaped


_ESCAPE_NEEDED = re.compile(r'["\\\x00-\x1f]')


def _needs_escape(text: str) -> bool:
    return _ESCAPE_NEEDED.search(text) is not None
