"""The error mapping of the ml-commons front: any exception to OpenSearch's error body.

An ``MLStreamError`` carries its status and its body (``errors``); anything else is a
bug, logged with its traceback and answered 500 without details.
"""

from __future__ import annotations

from ...errors import MLStreamError
from ...server.routing import Front, Reply, known_error


def error_reply(exc: BaseException, trace: bool = False) -> Reply:
    """The JSON error reply for any exception (the one place statuses are chosen).

    ``trace`` (``?error_trace=true``) adds OpenSearch's ``stack_trace`` field: the error's
    class and reason, and those of its causes within mlstream. Never Python frames, and
    never for a bug, whose details stay in the log.
    """
    error = known_error(exc)
    body = error.to_body()
    if trace and error is exc:  # a bug's details stay in the log
        body["error"]["stack_trace"] = _error_chain(error)
    # OpenSearch builds error bodies with filtering off (AbstractRestChannel.newErrorBuilder):
    # a filter_path meant for the answer must not hide the error.
    return Reply(error.http_status, body, dict(error.headers), filterable=False)


def _error_chain(exc: MLStreamError) -> str:
    lines, seen = [], 0
    current: BaseException | None = exc
    while isinstance(current, MLStreamError) and seen < 8:  # bounded: a cause chain could loop
        prefix = "" if not lines else "Caused by: "
        lines.append(f"{prefix}{type(current).__module__}.{type(current).__qualname__}: {current.reason}")
        current, seen = current.__cause__, seen + 1
    return "\n".join(lines)


ML_COMMONS_FRONT = Front("ml-commons", error_reply)
