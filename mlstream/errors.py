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
     |    +-- JsonPathError             400 (a response filter that is not JSONPath)
     |    +-- PathNotFound              400 (a JSONPath naming nothing in the document)
     |    +-- ScriptError               400 script_exception (a Painless process function: syntax,
     |    |                                 unsupported construct, runtime error, budget exceeded)
     |    +-- InterfaceRefused          400 status_exception (a model interface's JSON Schema)
     |    +-- InvalidField              400 (one named field; OpenAI's error body names it)
     |    +-- GuardrailTriggered        400 (a model's guardrail refused the input or the output)
     |    +-- InvalidIndexName          400 invalid_index_name_exception (stop-word indices)
     |    +-- IndexExists               400 resource_already_exists_exception
     |    +-- MapperParsing             400 mapper_parsing_exception (a stop-word document)
     +-- Unauthorized                   401 security_exception
     +-- Forbidden                      403 security_exception
     |    +-- AccessDenied              403 (a model the caller's key may not use: policy)
     +-- NotFound                       404 resource_not_found_exception
     |    +-- ModelNotFound             404 model_not_found (by id or name, on the OpenAI front)
     |    +-- IndexNotFound             404 index_not_found_exception (no record of the kind yet; a stop-word index)
     +-- MethodNotAllowed               405 method_not_allowed_exception
     +-- RequestTimeout                 408 timeout_exception (the request head was too slow)
     +-- Conflict                       409 status_exception
     |    +-- VersionConflict           409 version_conflict_engine_exception (a stop-word document)
     +-- PayloadTooLarge                413 content_too_long_exception
     +-- URITooLong                     414 too_long_http_line_exception
     +-- UnsupportedMediaType           415 media_type_header_exception
     +-- ExpectationFailed              417 illegal_argument_exception (an Expect we cannot meet)
     +-- Overloaded                     429 rejected_execution_exception (+ Retry-After)
     +-- BudgetExceeded                 429 budget_exceeded (+ Retry-After: the budget period's end; its scope)
     +-- RateLimited                    429 rate_limited (+ Retry-After: an rpm or tpm window; its scope)
     +-- HeadersTooLarge                431 too_long_http_header_exception
     |    +-- TrailersTooLarge          431 (a chunked body's trailer section)
     +-- NotImplementedCoding           501 illegal_argument_exception (a transfer coding we lack)
     +-- MethodNotImplemented           501 method_not_allowed_exception (a method no route has)
     +-- UpstreamError                  502 (or the upstream's 4xx) remote_inference_exception
     |    +-- UpstreamOverloaded        503 (+ Retry-After; Anthropic's 529 / overloaded_error)
     |    +-- UpstreamTimeout           504
     +-- ShuttingDown                   503 (a stream still open at the drain deadline)
     +-- VersionNotSupported            505 illegal_argument_exception
     +-- StoreError                     500 (the store could not be read or written)
     |    +-- StoreUnavailable          503 (the database cannot be reached; retry later)
     +-- CredentialError                500 (a wrong or missing master key)
     +-- ClientGone                     499 (the client left mid-stream; nobody is answered)
     +-- RetryCancelled                 499 (the caller left while a retry waited)
     +-- ProtocolError                  502 (parsers: SSE, event stream) -> UpstreamError at the edge

499 is nginx's "client closed request": it only ever reaches the access log.
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


class JsonPathError(BadRequest):
    """The expression is not a JSONPath ``mlstream.wire.jsonpath`` understands."""


class PathNotFound(BadRequest, LookupError):
    """A definite JSONPath names a value the document does not have (a lookup that failed)."""


class ScriptError(BadRequest):
    """A Painless process function did not compile, failed, or exceeded its budget
    (OpenSearch answers a script's failure as a 400 ``script_exception``)."""

    error_type = "script_exception"


class InterfaceRefused(BadRequest):
    """A model's ``interface`` JSON Schema refused a prediction's input or output
    (ml-commons answers it as a 400 ``OpenSearchStatusException``)."""

    error_type = "status_exception"


class InvalidField(BadRequest):
    """One field of a request cannot be taken; ``param`` names it (OpenAI's error body says which)."""

    def __init__(self, reason: str, *, param: str) -> None:
        super().__init__(reason)
        self.param = param


class Unauthorized(MLStreamError):
    http_status = 401
    error_type = "security_exception"


class Forbidden(MLStreamError):
    http_status = 403
    error_type = "security_exception"


class AccessDenied(Forbidden):
    """The caller's key may not use this model (its tenant, its key's models, its group):
    ml-commons' routes answer it, the other fronts answer it as a model that does not exist."""


class NotFound(MLStreamError):
    http_status = 404
    error_type = "resource_not_found_exception"


class ModelNotFound(NotFound):
    """A model named by id or name that no deployed model (or more than one) answers to."""

    error_type = "model_not_found"


class IndexNotFound(NotFound):
    """What OpenSearch answers when a route reads a kind of record none was ever stored of
    (ml-commons' system index does not exist yet), or a stop-word index that does not exist:
    ``no such index [...]``."""

    error_type = "index_not_found_exception"


class MethodNotAllowed(MLStreamError):
    http_status = 405
    error_type = "method_not_allowed_exception"


class RequestTimeout(MLStreamError):
    http_status = 408
    error_type = "timeout_exception"


class Conflict(MLStreamError):
    http_status = 409
    error_type = "status_exception"


class PayloadTooLarge(MLStreamError):
    http_status = 413
    error_type = "content_too_long_exception"


class URITooLong(MLStreamError):
    http_status = 414
    error_type = "too_long_http_line_exception"


class UnsupportedMediaType(MLStreamError):
    http_status = 415
    error_type = "media_type_header_exception"


class ExpectationFailed(MLStreamError):
    http_status = 417
    error_type = "illegal_argument_exception"


class Overloaded(MLStreamError):
    """Refused at once because capacity is used up; the client may retry later."""

    http_status = 429
    error_type = "rejected_execution_exception"

    def __init__(self, reason: str, *, retry_after_seconds: int = 1) -> None:
        super().__init__(reason, headers={"Retry-After": str(max(1, retry_after_seconds))})


class BudgetExceeded(MLStreamError):
    """An API key spent its budget for the current period; ``Retry-After`` is the period's end."""

    http_status = 429
    error_type = "budget_exceeded"

    def __init__(self, reason: str, *, retry_after_seconds: int, scope: str = "key") -> None:
        super().__init__(reason, headers={"Retry-After": str(max(1, retry_after_seconds))})
        self.scope = scope  # "key" or "tenant": whose budget

    def to_body(self) -> dict:
        body = super().to_body()
        body["error"]["scope"] = self.scope
        return body


class RateLimited(MLStreamError):
    """An API key or its tenant is past its ``rpm`` or ``tpm`` (sliding 60 s windows)."""

    http_status = 429
    error_type = "rate_limited"

    def __init__(self, reason: str, *, retry_after_seconds: int = 1, scope: str = "key") -> None:
        super().__init__(reason, headers={"Retry-After": str(max(1, retry_after_seconds))})
        self.scope = scope

    def to_body(self) -> dict:
        body = super().to_body()
        body["error"]["scope"] = self.scope
        return body


class HeadersTooLarge(MLStreamError):
    http_status = 431
    error_type = "too_long_http_header_exception"


class TrailersTooLarge(HeadersTooLarge):
    """A chunked request body's trailer section is over its bounds."""


class NotImplementedCoding(MLStreamError):
    http_status = 501
    error_type = "illegal_argument_exception"


class MethodNotImplemented(MLStreamError):
    http_status = 501
    error_type = "method_not_allowed_exception"


class VersionNotSupported(MLStreamError):
    http_status = 505
    error_type = "illegal_argument_exception"


class ShuttingDown(MLStreamError):
    """The server is shutting down: a stream still open at the drain deadline."""

    http_status = 503


class StoreError(MLStreamError):
    """The store could not be read or written (disk full, locked, corrupt)."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now (PostgreSQL down or unreachable): retry later."""

    http_status = 503


class CredentialError(MLStreamError):
    """A credential could not be sealed or unsealed (wrong or missing master key)."""


class ClientGone(MLStreamError):
    """The client closed or reset its connection mid-stream."""

    http_status = 499


class RetryCancelled(MLStreamError):
    """The caller went away while a retry was waiting."""

    http_status = 499


class UpstreamError(MLStreamError):
    """The remote model service failed or answered with an error.

    A 4xx answer from the upstream is passed on with its status (the caller's
    request or credentials were wrong); anything else becomes 502.
    """

    http_status = 502
    error_type = "remote_inference_exception"

    def __init__(self, reason: str, *, upstream_status: int | None = None,
                 headers: dict[str, str] | None = None, kind: str = "stream") -> None:
        # The one status chosen per instance: the provider's 4xx, passed on as it is.
        passed_on = upstream_status if upstream_status and 400 <= upstream_status < 500 else None
        super().__init__(reason, status=passed_on, headers=headers)
        self.upstream_status = upstream_status
        # What failed, for metrics: the provider's status, else "connection", "timeout"
        # or "stream" (a malformed or failing stream).
        self.kind = str(upstream_status) if upstream_status else kind


class UpstreamOverloaded(UpstreamError):
    """The provider says it is overloaded (Anthropic's 529, its ``overloaded_error``): 503
    with ``Retry-After``, which every HTTP client knows to retry."""

    http_status = 503

    def __init__(self, reason: str, *, upstream_status: int | None = None) -> None:
        super().__init__(reason, upstream_status=upstream_status, headers={"Retry-After": "1"})


class UpstreamTimeout(UpstreamError):
    http_status = 504

    def __init__(self, reason: str) -> None:
        super().__init__(reason, kind="timeout")


class ProtocolError(MLStreamError):
    """Bytes from a peer broke the wire format (pure parsers raise this)."""

    http_status = 502
    error_type = "remote_inference_exception"


class GuardrailTriggered(BadRequest):
    """A model's guardrail refused the call: ml-commons' words, "guardrails triggered for
    user input" (before the provider is called) or "... for LLM output" (its answer)."""


class InvalidIndexName(BadRequest):
    error_type = "invalid_index_name_exception"


class IndexExists(BadRequest):
    error_type = "resource_already_exists_exception"


class MapperParsing(BadRequest):
    error_type = "mapper_parsing_exception"


class VersionConflict(Conflict):
    error_type = "version_conflict_engine_exception"
