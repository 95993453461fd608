"""The one exception tree of mlstream.

Every error a user can see is an ``MLStreamError``. Each class carries the HTTP
status and the OpenSearch error ``type`` it stands for, so the HTTP front maps an
exception to a response in one place (``mlstream.server.responses``) instead of
an ``isinstance`` chain. Foreign exceptions (urllib3, sqlite3, json) are
translated where they enter our code, keeping the original as ``__cause__``.

    MLStreamError                       500 exception (a genuine bug)
     +-- BadRequest                     400 illegal_argument_exception
     |    +-- TemplateError             400 (unfilled placeholder, body not JSON)
     |    +-- EndpointRefused           400 (untrusted / private endpoint)
     +-- Unauthorized                   401 security_exception
     +-- Forbidden                      403 security_exception
     +-- NotFound                       404 resource_not_found_exception
     +-- MethodNotAllowed               405 method_not_allowed_exception
     +-- Conflict                       409 status_exception
     +-- PayloadTooLarge                413 content_too_long_exception
     +-- UnsupportedMediaType           415 media_type_header_exception
     +-- Overloaded                     429 rejected_execution_exception (+ Retry-After)
     +-- UpstreamError                  502 (or the upstream's 4xx) remote_inference_exception
     |    +-- UpstreamTimeout           504
     +-- ProtocolError                  (parsers: SSE, event stream) -> UpstreamError at the edge
"""

from __future__ import annotations


class MLStreamError(Exception):
    """Root of every mlstream error; ``reason`` is safe to show to a client."""

    http_status: int = 500
    error_type: str = "exception"

    def __init__(self, reason: str, *, status: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if status is not None:
            self.http_status = status
        self.headers: dict[str, str] = dict(headers or {})

    def to_body(self) -> dict:
        """The OpenSearch error body for this error."""
        cause = {"type": self.error_type, "reason": self.reason}
        return {"error": {"root_cause": [cause], **cause}, "status": self.http_status}


class BadRequest(MLStreamError):
    http_status = 400
    error_type = "illegal_argument_exception"


class TemplateError(BadRequest):
    """A connector template could not be rendered into a request."""


class EndpointRefused(BadRequest):
    """The upstream URL is not trusted, or points at a private address."""


class Unauthorized(MLStreamError):
    http_status = 401
    error_type = "security_exception"


class Forbidden(MLStreamError):
    http_status = 403
    error_type = "security_exception"


class NotFound(MLStreamError):
    http_status = 404
    error_type = "resource_not_found_exception"


class MethodNotAllowed(MLStreamError):
    http_status = 405
    error_type = "method_not_allowed_exception"


class Conflict(MLStreamError):
    http_status = 409
    error_type = "status_exception"


class PayloadTooLarge(MLStreamError):
    http_status = 413
    error_type = "content_too_long_exception"


class UnsupportedMediaType(MLStreamError):
    http_status = 415
    error_type = "media_type_header_exception"


class Overloaded(MLStreamError):
    """Refused at once because capacity is used up; the client may retry later."""

    http_status = 429
    error_type = "rejected_execution_exception"

    def __init__(self, reason: str, *, retry_after_seconds: int = 1) -> None:
        super().__init__(reason, headers={"Retry-After": str(max(1, retry_after_seconds))})


class UpstreamError(MLStreamError):
    """The remote model service failed or answered with an error.

    A 4xx answer from the upstream is passed on with its status (the caller's
    request or credentials were wrong); anything else becomes 502.
    """

    http_status = 502
    error_type = "remote_inference_exception"

    def __init__(self, reason: str, *, upstream_status: int | None = None,
                 headers: dict[str, str] | None = None, kind: str = "stream") -> None:
        status = upstream_status if upstream_status and 400 <= upstream_status < 500 else 502
        super().__init__(reason, status=status, headers=headers)
        self.upstream_status = upstream_status
        # What failed, for metrics: the provider's status, else "connection", "timeout"
        # or "stream" (a malformed or failing stream).
        self.kind = str(upstream_status) if upstream_status else kind


class UpstreamTimeout(UpstreamError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason, kind="timeout")
        self.http_status = 504


class ProtocolError(MLStreamError):
    """Bytes from a peer broke the wire format (pure parsers raise this)."""

    http_status = 502
    error_type = "remote_inference_exception"
