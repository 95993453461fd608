"""JSON replies on the wire, and the error mapping of the ml-commons front.

The error mapping lives here and only here: an ``MLStreamError`` carries its
status; anything else is a bug, logged with its traceback and answered 500
without details.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..errors import MLStreamError
from ..speedups import dumps_json
from .routing import Reply

log = logging.getLogger(__name__)


def error_reply(exc: BaseException) -> Reply:
    """The JSON error reply for any exception (the one place statuses are chosen)."""
    if not isinstance(exc, MLStreamError):
        log.error("unexpected error while handling a request", exc_info=exc)
        exc = MLStreamError("internal error: the server failed to handle the request")
    return Reply(exc.http_status, exc.to_body(), dict(exc.headers))


def json_bytes(body: Any, *, pretty: bool = False) -> bytes:
    if pretty:
        return utf8(json.dumps(body, indent=2, ensure_ascii=False)) + b"\n"
    return dumps_json(body)


def utf8(text: str) -> bytes:
    # A lone surrogate (JSON allows "\ud800") cannot be UTF-8; it can only sit inside a
    # JSON string, where backslashreplace writes exactly its JSON escape back.
    return text.encode("utf-8", "backslashreplace")
