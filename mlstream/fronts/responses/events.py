"""The Responses front's stream events (``routing.StreamEvents``), each ``event: <type>``
with its ``sequence_number``:

    response.created, response.in_progress            the response, in_progress, no output
    per text answer      response.output_item.added (message), response.content_part.added,
                         response.output_text.delta ..., response.output_text.done,
                         response.content_part.done, response.output_item.done
    per reasoning        response.output_item.added (reasoning), response.reasoning_text.delta ...,
                         response.reasoning_text.done, response.output_item.done
    per tool call        response.output_item.added (function_call),
                         response.function_call_arguments.delta (its whole arguments),
                         response.function_call_arguments.done, response.output_item.done
    the end              response.completed (or response.incomplete: max_output_tokens,
                         content_filter) with the whole output and usage
    a provider failure   response.failed (status failed, its error), never completed

The finished response (completed, incomplete or failed) goes to ``keep`` (the route stores
it when ``store`` is true).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import MLStreamError
from ...server.responses import json_bytes
from ...speedups import escape_json_string
from ...wire.sse import EVENT_END
from ..chat import stream_usage
from ..openai.wire import finish_reason as openai_finish_reason
from ..openai.wire import tool_call
from . import wire

Keep = Callable[[dict[str, Any]], None]
# An output_text.delta event: its head (up to the text, ``_open_item``), the escaped text, the sequence number.
_TEXT_DELTA = b'%b%b,"logprobs":[],"sequence_number":%d}' + EVENT_END


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(16).hex()}"  # a random UUID's 32 hex digits, without building one


class ResponseEvents:
    """One stream's events: the output so far, the open item, the next sequence number."""

    def __init__(self, body: Mapping[str, Any], *, response_id: str, created_at: int, model: str,
                 keep: Keep | None = None) -> None:
        self._body = body
        self._response_id = response_id
        self._created_at = created_at
        self._model = model
        self._keep = keep
        self._sequence = 0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item being streamed (message or reasoning)
        self._open_kind: str | None = None         # its type
        self._text: list[str] = []                # its text so far
        self._tool_calls = 0
        self._text_head = b""  # an output_text.delta event up to its text, for the open message

    # --- StreamEvents ---------------------------------------------------------------

    def relayed(self, data: str | bytes) -> bytes:
        raise TypeError("the Responses front reads every stream as chat")

    def content(self, content: Any) -> bytes:
        if type(content) is str and self._open_kind == "message":  # the hot path: its event's head prepared
            self._text.append(content)
            self._sequence += 1
            return _TEXT_DELTA % (self._text_head, escape_json_string(content).encode("utf-8", "backslashreplace"),
                                  self._sequence - 1)
        if isinstance(content, str):
            return self._open_item("message") + self.content(content)
        call = tool_call(content)
        if call is None:
            return self.content(str(content))
        call_id, name, arguments = call
        self._tool_calls += 1
        events = self._start() + self._close()
        index = len(self._output)
        item_id = new_item_id("fc")
        events += self._event("response.output_item.added", output_index=index,
                              item=wire.function_call_item(item_id, call_id, name, "", "in_progress"))
        events += self._event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                              delta=arguments)
        events += self._event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                              name=name, arguments=arguments)
        item = wire.function_call_item(item_id, call_id, name, arguments)
        self._output.append(item)
        return events + self._event("response.output_item.done", output_index=index, item=item)

    def reasoning(self, text: str) -> bytes:
        return self._open_item("reasoning") + self._text_delta("response.reasoning_text.delta", text)

    def last(self, finish_reason: str | None, usage: dict[str, int] | None) -> bytes:
        events = self._start() + self._close()
        reason = openai_finish_reason(finish_reason) or "stop"
        status, incomplete = wire.status_of(reason)
        if not self._output:  # an empty answer is still a message
            events += self._open_item("message") + self._close()
        response = self._response(status, wire.usage(stream_usage(usage)), incomplete=incomplete)
        self._kept(response)
        return events + self._event("response.completed" if status == "completed" else "response.incomplete",
                                    response=response)

    def error(self, error: MLStreamError) -> bytes:
        events = self._start()
        response = self._response("failed", None, error={"code": "server_error", "message": error.reason})
        self._kept(response)
        return events + self._event("response.failed", response=response)

    # --- the pieces -------------------------------------------------------------------

    def _response(self, status: str, usage: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        return wire.response(self._body, response_id=self._response_id, created_at=self._created_at,
                             model=self._model, status=status, output=list(self._output), usage_counts=usage,
                             **extra)

    def _kept(self, response: dict[str, Any]) -> None:
        if self._keep is not None:
            self._keep(response)

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode("ascii") + b"\ndata: " + json_bytes(data) + EVENT_END

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        response = json_bytes(self._response("in_progress", None))  # once, for both events
        return self._raw_event("response.created", response) + self._raw_event("response.in_progress", response)

    def _raw_event(self, kind: str, response: bytes) -> bytes:
        sequence, self._sequence = self._sequence, self._sequence + 1
        return (b'event: %b\ndata: {"type":"%b","sequence_number":%d,"response":%b}' % (
            kind.encode("ascii"), kind.encode("ascii"), sequence, response) + EVENT_END)

    def _open_item(self, kind: str) -> bytes:
        if self._open_kind == kind:
            return b""
        events = self._start() + self._close()
        index = len(self._output)
        if kind == "message":
            item = wire.message_item(new_item_id("msg"), "", "in_progress")
            self._text_head = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                               b'"item_id":"%b","output_index":%d,"content_index":0,"delta":'
                               % (item["id"].encode("ascii"), index))
            events += self._event("response.output_item.added", output_index=index, item=item)
            events += self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                  content_index=0, part=wire.output_text(""))
        else:
            item = {"id": new_item_id("rs"), "type": "reasoning", "summary": []}
            events += self._event("response.output_item.added", output_index=index, item=item)
        self._open, self._open_kind, self._text = item, kind, []
        return events

    def _text_delta(self, kind: str, text: str) -> bytes:
        self._text.append(text)
        item = self._open
        assert item is not None
        extra = {"logprobs": []} if item["type"] == "message" else {}
        return self._event(kind, item_id=item["id"], output_index=len(self._output), content_index=0, delta=text,
                           **extra)

    def _close(self) -> bytes:
        item = self._open
        if item is None:
            return b""
        self._open = self._open_kind = None
        index, text = len(self._output), "".join(self._text)
        if item["type"] == "message":
            events = self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                 content_index=0, text=text, logprobs=[])
            events += self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                  content_index=0, part=wire.output_text(text))
            done = wire.message_item(item["id"], text)
        else:
            events = self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                 content_index=0, text=text)
            done = wire.reasoning_item(item["id"], text)
        self._output.append(done)
        return events + self._event("response.output_item.done", output_index=index, item=done)
