"""What goes on the wire: JSON bodies, the error mapping, SSE events, HTTP chunks.

The error mapping lives here and only here: an ``MLStreamError`` carries its
status; anything else is a bug, logged with its traceback and answered 500
without details.
"""

from __future__ import annotations

import json
import logging
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from dataclasses import dataclass, field
from typing import Any

from ..errors import MLStreamError
from ..sse import encode_comment

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json; charset=UTF-8"


def error_reply(exc: BaseException) -> Reply:
    """The JSON error reply for any exception (the one place statuses are chosen)."""
    if not isinstance(exc, MLStreamError):
        log.error("unexpected error while handling a request", exc_info=exc)
        exc = MLStreamError("internal error: the server failed to handle the request")
    return Reply(exc.http_status, exc.to_body(), dict(exc.headers))


def json_bytes(body: Any, *, pretty: bool = False) -> bytes:
    if pretty:
        return _utf8(json.dumps(body, indent=2, ensure_ascii=False)) + b"\n"
    return _utf8(json.dumps(body, separators=(",", ":"), ensure_ascii=False))


def _utf8(text: str) -> bytes:
    # A lone surrogate (JSON allows "\ud800") cannot be UTF-8; it can only sit inside a
    # JSON string, where backslashreplace writes exactly its JSON escape back.
    return text.encode("utf-8", "backslashreplace")


# --- SSE events of the predict stream -------------------------------------------------
# Built by concatenation around json.dumps of the content: this runs once per relayed
# token, and the envelope never changes.

_EVENT_HEAD = b'data: {"inference_results":[{"output":[{"name":"response","dataAsMap":{"content":'
_EVENT_TAIL = b',"is_last":false}}]}]}\n\n'
HEARTBEAT = encode_comment("ping")


def content_event(content: Any) -> bytes:
    # encode_basestring is json's C string escaper: json.dumps(text) without its setup.
    text = encode_basestring(content) if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return _EVENT_HEAD + _utf8(text) + _EVENT_TAIL


def last_event(finish_reason: str | None, usage: dict[str, int] | None) -> bytes:
    data: dict[str, Any] = {"content": "", "is_last": True}
    if finish_reason is not None:
        data["finish_reason"] = finish_reason
    if usage is not None:
        data["usage"] = usage
    envelope = {"inference_results": [{"output": [{"name": "response", "dataAsMap": data}]}]}
    return b"data: " + json_bytes(envelope) + b"\n\n"


def error_event(error: MLStreamError) -> bytes:
    return b"data: " + json_bytes({"error": error.reason}) + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of ``data`` (never empty: that would end the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def unframed(data: bytes) -> bytes:
    """``data`` as it is: the framing of a close-delimited (HTTP/1.0) body."""
    return data


LAST_CHUNK = b"0\r\n\r\n"
