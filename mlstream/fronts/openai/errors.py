"""The error mapping of the OpenAI front: any exception to OpenAI's error body.

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

The status is the error's own (``errors``), as on the ml-commons front; only the body
differs. ``type`` and ``code`` are the ones OpenAI's API answers for that status, so
the OpenAI SDKs raise the exception class their users already catch
(``BadRequestError``, ``AuthenticationError``, ``NotFoundError``, ``RateLimitError``,
``InternalServerError``...). Anything that is not an ``MLStreamError`` is a bug: logged
with its traceback, answered 500 without details. Mid-stream, the same body is the
stream's last event (``error_event``).
"""

from __future__ import annotations

from typing import Any

from ...errors import BudgetExceeded, GuardrailTriggered, InvalidField, MLStreamError, ModelNotFound, RateLimited
from ...server.responses import json_bytes
from ...server.routing import Front, Reply, known_error
from ...wire.sse import encode_data


# OpenAI's error type for each status it answers; others by class (4xx / 5xx).
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error"}
_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def error_body(exc: MLStreamError) -> dict[str, Any]:
    status = exc.http_status
    error_type = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    param = exc.param if isinstance(exc, InvalidField) else None
    code = _CODES.get(status)
    if isinstance(exc, ModelNotFound):
        param, code = "model", "model_not_found"
    elif isinstance(exc, BudgetExceeded):  # OpenAI's answer when an account's quota is spent
        error_type, code = "insufficient_quota", "insufficient_quota"
    elif isinstance(exc, GuardrailTriggered):
        code = "content_filter"  # as Azure OpenAI answers a request its content filter refused
    error = {"message": exc.reason, "type": error_type, "param": param, "code": code}
    if isinstance(exc, (BudgetExceeded, RateLimited)):
        error["scope"] = exc.scope  # whose limit: "key" or "tenant"
    return {"error": error}


def error_reply(exc: BaseException) -> Reply:
    """The reply for any exception (the one place the OpenAI front shapes errors)."""
    error = known_error(exc)
    return Reply(error.http_status, error_body(error), dict(error.headers))


def error_event(exc: MLStreamError) -> bytes:
    """A stream's failure after its first byte, as OpenAI sends one: ``data: {"error": ...}``."""
    return encode_data(json_bytes(error_body(exc)))


OPENAI_FRONT = Front("openai", lambda exc, trace: error_reply(exc))  # OpenAI has no error_trace
