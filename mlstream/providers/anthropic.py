"""Anthropic's Messages API, streamed as SSE (``anthropic/v1/messages``).

    message_start                      usage so far (input_tokens)
    content_block_start  tool_use      a tool call begins: id and name
    content_block_delta  text_delta    Delta(text)
                         thinking_delta
                                       Reasoning(thinking): its own field of dataAsMap
                         input_json_delta
                                       a fragment of the tool call's JSON input
                         signature_delta
                                       - (not relayed)
    content_block_stop                 a finished tool call -> Delta(its content block,
                                       {"type": "tool_use", "id", "name", "input": {...}})
    message_delta                      the stop reason, usage (output_tokens)
    message_stop                       Done(stop reason, usage under USAGE_FIELDS)
    ping                               -
    error                              Failure, with the status its type stands for
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ..models.connectors import Connector, UpstreamRequest
from ..errors import UpstreamError, UpstreamOverloaded, UpstreamTimeout
from .common import JsonEventDecoder, ToolCalls, counts, encode_body, json_object, json_object_body, text
from ..usage.tokens import token_counts
from .base import StreamKind
from .events import Chunk, Delta, Done, Failure, Reasoning, StreamItem

# The usage the stream's final event carries: Anthropic's own names, as its non-stream
# answer has them (the cache counters and any other field are not relayed).
USAGE_FIELDS = ("input_tokens", "output_tokens")

# What an error event's type means for our caller (before the first event it becomes
# the HTTP status; after it, the final error event). overloaded_error is Anthropic's
# 529, which no HTTP client knows: 503, which every client retries.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 502,
    "overloaded_error": 503,
    "timeout_error": 504,
}


@dataclass(frozen=True, slots=True)
class AnthropicMessagesDialect:
    name: str

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        body = json_object_body(request)
        body["stream"] = True
        headers = dict(request.headers)
        headers.setdefault("Accept", "text/event-stream")
        return replace(request, headers=headers, body=encode_body(body))

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> "AnthropicStreamDecoder | AnthropicRelayDecoder":
        """RELAY (the Anthropic front over an Anthropic model): every event whole."""
        if kind is StreamKind.RELAY:
            return AnthropicRelayDecoder()
        return AnthropicStreamDecoder()


ANTHROPIC_MESSAGES = AnthropicMessagesDialect("anthropic/v1/messages")


def error_failure(kind: str, message: str) -> Failure:
    """An Anthropic error (``{"type": kind, "message": ...}``) as our Failure."""
    reason = f"Error from remote service: {kind}: {message}"
    status = _ERROR_STATUS.get(kind, 502)
    if status == 504:
        return Failure(UpstreamTimeout(reason))
    if status == 503:
        return Failure(UpstreamOverloaded(reason))
    headers = {"Retry-After": "1"} if status == 429 else None
    return Failure(UpstreamError(reason, upstream_status=status, headers=headers))


class AnthropicStreamDecoder(JsonEventDecoder):
    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._message: dict[str, Any] = {}  # message_start's: its id and model
        self._tools = ToolCalls()

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        kind = value.get("type")
        index = value.get("index")
        if kind == "content_block_delta":
            delta = json_object(value.get("delta"))
            delta_type = delta.get("type")
            if delta_type == "text_delta":
                piece = text(delta.get("text"))
                return [Delta(piece)] if piece else ()
            if delta_type == "thinking_delta":
                piece = text(delta.get("thinking"))
                return [Reasoning(piece)] if piece else ()
            if delta_type == "input_json_delta":
                fragment = text(delta.get("partial_json"))
                if isinstance(index, int) and fragment is not None:
                    failure = self._tools.add(index, fragment)
                    return [failure] if failure else ()
            return ()
        if kind == "content_block_start":
            block = json_object(value.get("content_block"))
            if block.get("type") == "tool_use" and isinstance(index, int):
                failure = self._tools.start(index, text(block.get("id")), text(block.get("name")))
                return [failure] if failure else ()
            if block.get("type") == "text" and text(block.get("text")):
                return [Delta(block["text"])]
            return ()
        if kind == "content_block_stop":
            call = self._tools.stop(index) if isinstance(index, int) else None
            if call is None:
                return ()
            tool_input = call.input()
            if isinstance(tool_input, Failure):
                return [tool_input]
            return [Delta({"type": "tool_use", "id": call.call_id, "name": call.name, "input": tool_input})]
        if kind == "message_start":
            self._message = json_object(value.get("message"))
            self._usage.update(json_object(self._message.get("usage")))
            return ()
        if kind == "message_delta":
            stop_reason = text(json_object(value.get("delta")).get("stop_reason"))
            if stop_reason:
                self._stop_reason = stop_reason
            self._usage.update(json_object(value.get("usage")))
            return ()
        if kind == "message_stop":
            return [_done(self._stop_reason, self._usage, self._message)]
        if kind == "error":
            error = json_object(value.get("error"))
            kind_name = text(error.get("type")) or "error"
            return [error_failure(kind_name, text(error.get("message")) or kind_name)]
        return ()  # ping, and anything new

    def at_end(self) -> StreamItem:
        return Failure(UpstreamError("the provider ended the stream before message_stop"))


class AnthropicRelayDecoder(JsonEventDecoder):
    """Anthropic's events relayed whole (``Chunk``, its JSON text; its ``type`` names the
    event), thinking and signatures included: ``message_stop`` is Done (with the stop reason
    and usage seen, for the records), an ``error`` event a Failure, ``ping`` dropped (the
    writer sends its own heartbeats)."""

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._message: dict[str, Any] = {}  # message_start's: its id and model
        self._payload = b""

    def _on_event(self, payload: bytes) -> Iterable[StreamItem]:
        self._payload = payload  # the event's own bytes, relayed by on_object
        return super()._on_event(payload)

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        kind = value.get("type")
        if kind == "message_start":
            self._message = json_object(value.get("message"))
            self._usage.update(json_object(self._message.get("usage")))
        elif kind == "message_delta":
            self._stop_reason = text(json_object(value.get("delta")).get("stop_reason")) or self._stop_reason
            self._usage.update(json_object(value.get("usage")))
        elif kind == "message_stop":
            return [_done(self._stop_reason, self._usage, self._message)]
        elif kind == "error":
            error = json_object(value.get("error"))
            kind_name = text(error.get("type")) or "error"
            return [error_failure(kind_name, text(error.get("message")) or kind_name)]
        elif kind == "ping":
            return ()
        return [Chunk(self._payload.decode("utf-8", "replace"))]

    def at_end(self) -> StreamItem:
        return Failure(UpstreamError("the provider ended the stream before message_stop"))


def _done(stop_reason: str | None, usage: dict[str, Any], message: dict[str, Any]) -> Done:
    """``message_stop``: the stop reason and usage seen, message_start's id and model."""
    return Done(stop_reason, counts(usage, USAGE_FIELDS) if usage else None, token_counts(usage),
                text(message.get("id")), text(message.get("model")))
