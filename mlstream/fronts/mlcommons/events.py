"""ml-commons' stream events: each value of a stream as one SSE ``data`` event in
ml-commons' envelope, ``{"inference_results": [{"output": [{"name": "response",
"dataAsMap": {...}}]}]}``; the last ``is_last``, or ``{"error": ...}`` after a failure.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import MLStreamError
from ...inference.predict import CallMeter
from ...server.responses import json_bytes
from ...server.routing import StreamEvents
from ...speedups import escape_json_string
from ...wire.sse import DATA_FIELD, EVENT_END, encode_data

# The event around a token never changes: the envelope and the SSE data framing
# (``sse``'s, for a one-line payload: escaped JSON never holds a raw line break) are
# put around the escaped text in one concatenation, once per relayed token.
_CONTENT_HEAD = DATA_FIELD + b'{"inference_results":[{"output":[{"name":"response","dataAsMap":{"content":'
_CONTENT_TAIL = b',"is_last":false}}]}]}' + EVENT_END


def content_event(content: Any) -> bytes:
    text = escape_json_string(content) if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    # backslashreplace: a lone surrogate can only sit in a JSON string, where it
    # writes exactly its JSON escape back (responses.utf8).
    return _CONTENT_HEAD + text.encode("utf-8", "backslashreplace") + _CONTENT_TAIL


def reasoning_event(text: str) -> bytes:
    """A piece of reasoning: ``content`` stays empty, so a client that only reads
    ``content`` never mixes the model's thinking into its answer."""
    return encode_data(json_bytes({"inference_results": [{"output": [{"name": "response", "dataAsMap": {
        "content": "", "reasoning_content": text, "is_last": False}}]}]}))


def last_event(finish_reason: str | None, usage: dict[str, int] | None, model_id: str | None = None) -> bytes:
    data: dict[str, Any] = {"content": "", "is_last": True}
    if model_id is not None:
        data["model_id"] = model_id
    if finish_reason is not None:
        data["finish_reason"] = finish_reason
    if usage is not None:
        data["usage"] = usage
    return encode_data(json_bytes({"inference_results": [{"output": [{"name": "response", "dataAsMap": data}]}]}))


def error_event(error: MLStreamError) -> bytes:
    return encode_data(json_bytes({"error": error.reason}))


def relayed_event(data: str | bytes) -> bytes:
    """A provider's own chunk has no place in ml-commons' envelope; only the OpenAI front relays them."""
    raise TypeError("the ml-commons front never relays a provider's chunks")


class _MLCommonsEvents:
    content = staticmethod(content_event)
    reasoning = staticmethod(reasoning_event)
    relayed = staticmethod(relayed_event)
    last = staticmethod(last_event)
    error = staticmethod(error_event)


ML_COMMONS_EVENTS: StreamEvents = _MLCommonsEvents()


class RoutedEvents(_MLCommonsEvents):
    """A router model's stream: its last event names the target that served it
    (``dataAsMap.model_id``), as the ``X-MLStream-Model-Id`` header does."""

    def __init__(self, meter: CallMeter) -> None:
        self._meter = meter

    def last(self, finish_reason: str | None, usage: dict[str, int] | None) -> bytes:  # type: ignore[override]
        return last_event(finish_reason, usage, self._meter.target)
