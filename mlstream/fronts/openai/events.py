"""The OpenAI front's stream events (``routing.StreamEvents``): ``chat.completion.chunk``.

    relay (an OpenAI-interface model)     each provider chunk as it came, then ``data: [DONE]``
    translated (Converse, Anthropic,      a role delta first, content deltas (reasoning as
      Gemini, SageMaker chat)             ``reasoning_content``), each tool call as two deltas
                                          (index, id, type, name; then its arguments),
                                          a finish_reason chunk, the usage chunk when
                                          ``stream_options.include_usage``, then ``data: [DONE]``

A failure after the first byte is OpenAI's error body as the last event, with no
``[DONE]`` (``errors.error_event``). Heartbeats stay SSE comments, which the
OpenAI SDKs skip.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import MLStreamError
from ...server.responses import json_bytes
from ...speedups import escape_json_string
from ...wire.sse import DATA_FIELD, EVENT_END
from .errors import error_event
from .wire import finish_reason as openai_finish_reason
from .wire import openai_usage, tool_call

DONE_EVENT = DATA_FIELD + b"[DONE]" + EVENT_END


class OpenAIChatEvents:
    """One stream's events; the translated ones keep count of what was sent."""

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool,
                 relay: bool) -> None:
        self._relay = relay
        self._include_usage = include_usage
        # Every translated chunk is this head, a delta, then the tail.
        self._head = DATA_FIELD + json_bytes({"id": completion_id, "object": "chat.completion.chunk",
                                              "created": created, "model": model})[:-1] + b',"choices":[{'
        self._tail = b',"logprobs":null}]' + (b',"usage":null' if include_usage else b"") + b"}" + EVENT_END
        self._role_sent = False
        self._tool_calls = 0

    def relayed(self, data: str | bytes) -> bytes:
        # bytes: the provider's own, valid UTF-8 (providers.events.Chunk): written as they came
        return DATA_FIELD + (data if type(data) is bytes else data.encode("utf-8", "backslashreplace")) + EVENT_END

    def content(self, content: Any) -> bytes:
        if isinstance(content, str):
            return self._role() + self._delta(b'{"content":' + _json_string(content) + b"}")
        call = tool_call(content)
        if call is None:  # a provider's block with no OpenAI counterpart: its JSON as text
            return self._role() + self._delta(b'{"content":' + _json_string(json.dumps(content)) + b"}")
        call_id, name, arguments = call
        index, self._tool_calls = self._tool_calls, self._tool_calls + 1
        opening = json_bytes({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                              "function": {"name": name, "arguments": ""}}]})
        pieces = json_bytes({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        return self._role() + self._delta(opening) + self._delta(pieces)

    def reasoning(self, text: str) -> bytes:
        return self._role() + self._delta(b'{"reasoning_content":' + _json_string(text) + b"}")

    def last(self, finish_reason: str | None, usage: dict[str, int] | None) -> bytes:
        if self._relay:
            return DONE_EVENT
        reason = openai_finish_reason(finish_reason) or "stop"
        if self._tool_calls and reason == "stop":  # Gemini ends a function call with STOP
            reason = "tool_calls"
        events = self._role() + self._delta(b"{}", json_bytes(reason))
        if self._include_usage:
            counted = openai_usage(usage) or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            events += self._head[:-1] + b'],"usage":' + json_bytes(counted) + b"}" + EVENT_END
        return events + DONE_EVENT

    def error(self, error: MLStreamError) -> bytes:
        return error_event(error)

    def _role(self) -> bytes:
        if self._role_sent:
            return b""
        self._role_sent = True
        return self._delta(b'{"role":"assistant","content":""}')

    def _delta(self, delta: bytes, finish: bytes = b"null") -> bytes:
        return self._head + b'"index":0,"delta":' + delta + b',"finish_reason":' + finish + self._tail


def _json_string(text: str) -> bytes:
    return escape_json_string(text).encode("utf-8", "backslashreplace")
