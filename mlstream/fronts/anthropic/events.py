"""The Anthropic front's stream events (``routing.StreamEvents``): Anthropic's SSE sequence.

    relay (an Anthropic model)     each provider event as it came (``event:`` its type),
                                   then ``message_stop``
    translated (any other model)   message_start, then per block content_block_start,
                                   deltas (text_delta, thinking_delta, one input_json_delta
                                   with a tool call's whole input), content_block_stop;
                                   message_delta (stop_reason, usage), message_stop

A failure after the first byte is an ``error`` event and no ``message_stop``
(``errors.error_event``). Heartbeats are SSE comments, which the SDK skips.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...errors import MLStreamError
from ...server.responses import json_bytes
from ...speedups import escape_json_string
from ...wire.sse import EVENT_END
from ..chat import stream_usage
from ..openai.wire import finish_reason as openai_finish_reason
from ..openai.wire import tool_call
from . import wire
from .errors import error_event

# Anthropic writes an event's type first in its data: read without parsing the event.
_LEADING_TYPE = re.compile(r'\s*\{\s*"type"\s*:\s*"([A-Za-z_]+)"')
# A text_delta event: its head (up to the text, ``_open``) and the escaped text.
_TEXT_DELTA = b"%b%b}}" + EVENT_END
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}' + EVENT_END


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode("ascii") + b"\ndata: " + json_bytes(data) + EVENT_END


class MessagesEvents:
    """One stream's events; the translated ones keep the open content block."""

    def __init__(self, *, message_id: str, model: str, relay: bool) -> None:
        self._relay = relay
        self._message_id = message_id
        self._model = model
        self._started = False
        self._block: str | None = None  # the open block's type
        self._index = -1                # the open (or last) block's index
        self._tool_calls = 0
        self._text_head = b""  # a text delta event up to its text, for the open block

    def relayed(self, data: str) -> bytes:
        found = _LEADING_TYPE.match(data)
        name = found.group(1) if found else _type_of(data)
        return b"event: " + name.encode("ascii", "replace") + b"\ndata: " + data.encode("utf-8", "backslashreplace") \
            + EVENT_END

    def content(self, content: Any) -> bytes:
        if type(content) is str and self._block == "text":  # the hot path: its event's head prepared
            return _TEXT_DELTA % (self._text_head, _json_string(content))
        if isinstance(content, str):
            return self._open("text", {"type": "text", "text": ""}) + self.content(content)
        call = tool_call(content)
        if call is None:  # a provider's block with no Anthropic counterpart: its JSON as text
            return self.content(json.dumps(content))
        call_id, name, arguments = call
        self._tool_calls += 1
        events = self._open("tool_use", {"type": "tool_use", "id": call_id, "name": name,
                                                         "input": {}})
        return events + self._delta({"type": "input_json_delta", "partial_json": arguments}) + self._close()

    def reasoning(self, text: str) -> bytes:
        return self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""}) + self._delta(
            {"type": "thinking_delta", "thinking": text})

    def last(self, finish_reason: str | None, usage: dict[str, int] | None) -> bytes:
        if self._relay:
            return MESSAGE_STOP
        reason = wire.stop_reason(openai_finish_reason(finish_reason))
        if self._tool_calls and reason == "end_turn":  # Gemini ends a function call with STOP
            reason = "tool_use"
        events = self._start() + self._close()
        events += event("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": reason, "stop_sequence": None},
                                          "usage": wire.usage(stream_usage(usage))})
        return events + MESSAGE_STOP

    def error(self, error: MLStreamError) -> bytes:
        return error_event(error)

    def _start(self) -> bytes:
        if self._started or self._relay:
            return b""
        self._started = True
        message = {"id": self._message_id, "type": "message", "role": "assistant", "model": self._model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 0, "output_tokens": 0}}
        return event("message_start", {"type": "message_start", "message": message})

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        """A block of ``kind`` open for deltas: the one open, or a new one after closing it."""
        if self._block == kind:
            return b""
        events = self._start() + self._close()
        self._index += 1
        self._block = kind
        self._text_head = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                           b'"delta":{"type":"text_delta","text":' % self._index)
        return events + event("content_block_start", {"type": "content_block_start", "index": self._index,
                                                      "content_block": block})

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})


def _json_string(text: str) -> bytes:
    return escape_json_string(text).encode("utf-8", "backslashreplace")


def _type_of(data: str) -> str:
    try:
        value = json.loads(data)
    except ValueError:
        return "message"
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) and kind.isidentifier() else "message"
