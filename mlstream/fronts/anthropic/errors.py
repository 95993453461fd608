"""The error mapping of the Anthropic front: any exception to Anthropic's error body.

    {"type": "error", "error": {"type": ..., "message": ...}}

The status is the error's own (``errors``), as on every front; ``type`` is the one
Anthropic answers for that status, so the ``anthropic`` SDK raises the class its users
catch (``BadRequestError``, ``AuthenticationError``, ``NotFoundError``, ``RateLimitError``,
``InternalServerError``, ...). Mid-stream, the same body is an ``error`` event, and the
stream ends without ``message_stop``.
"""

from __future__ import annotations

from typing import Any

from ...errors import BudgetExceeded, MLStreamError, RateLimited
from ...server.responses import json_bytes
from ...server.routing import Front, Reply, known_error
from ...wire.sse import EVENT_END


# Anthropic's error type for each status it answers; others by class (4xx / 5xx).
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
          503: "overloaded_error", 504: "timeout_error"}


def error_body(exc: MLStreamError) -> dict[str, Any]:
    status = exc.http_status
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    error = {"type": kind, "message": exc.reason}
    if isinstance(exc, (BudgetExceeded, RateLimited)):
        error["scope"] = exc.scope  # whose limit: "key" or "tenant"
    return {"type": "error", "error": error}


def error_reply(exc: BaseException) -> Reply:
    """The reply for any exception (the one place the Anthropic front shapes errors)."""
    error = known_error(exc)
    return Reply(error.http_status, error_body(error), dict(error.headers))


def error_event(exc: MLStreamError) -> bytes:
    """A stream's failure after its first byte: ``event: error`` with the same body."""
    return b"event: error\ndata: " + json_bytes(error_body(exc)) + EVENT_END


ANTHROPIC_FRONT = Front("anthropic", lambda exc, trace: error_reply(exc))
