"""What the decoders share: the provider's JSON taken defensively, SSE events whose
data is a JSON object, and tool calls assembled from their streamed fragments.

Pure: no I/O. A provider's JSON is not trusted to have the documented types, so
every read goes through ``json_object`` / ``text`` / ``count``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..models.connectors import UpstreamRequest
from ..errors import BadRequest, ProtocolError, UpstreamError
from ..speedups import dumps_json, loads_json
from ..wire.sse import SSEDecoder
from ..usage.tokens import TokenCounts, token_counts
from .events import Delta, Done, Failure, Reasoning, StreamItem


def json_object_body(request: UpstreamRequest) -> dict[str, Any]:
    """The rendered request body as a JSON object (a streaming dialect edits it)."""
    try:
        # The stdlib's: the body is written again, and orjson reads an integer past 64
        # bits as a float, which would change what the provider is sent.
        body = json.loads(request.body or b"")
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise BadRequest("the connector's request_body must render to a JSON object to stream it")
    return body


def encode_body(body: Mapping[str, Any]) -> bytes:
    return dumps_json(body)


def json_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def count(value: Any) -> int | None:
    """A token count, or None for anything the provider sent that is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def counts(usage: Mapping[str, Any], names: Iterable[str]) -> dict[str, int | None]:
    """``names`` of a provider's usage object, each a count or None."""
    return {name: count(usage.get(name)) for name in names}


def parse_json(data: str | bytes) -> Any:
    """JSON text as a value, or None when it is not JSON."""
    try:
        return loads_json(data)
    except ValueError:
        return None


# A non-streaming answer is read whole into memory; past this size the provider is
# misbehaving (chat answers are kilobytes).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# A stream's tool calls, bounded as a non-streaming answer is (MAX_RESPONSE_BYTES):
# their JSON input fragments in all (characters, at most as many as bytes), and the calls
# open at once (a block started and not yet stopped). Past either the provider is broken.
MAX_TOOL_INPUT_CHARS = 32 * 1024 * 1024
MAX_OPEN_TOOL_CALLS = 128


@dataclass(slots=True)
class ToolCall:
    """A tool call being streamed: its id and name first, its JSON input in fragments."""

    call_id: str | None
    name: str | None
    fragments: list[str] = field(default_factory=list)

    def input(self) -> dict[str, Any] | Failure:
        """The whole input, or a Failure when the fragments do not make a JSON object."""
        joined = "".join(self.fragments)
        value = parse_json(joined) if joined.strip() else {}
        if not isinstance(value, dict):
            return Failure(UpstreamError(f"the provider's tool call {self.name} has an input that is not "
                                         "a JSON object"))
        return value


class ToolCalls:
    """One stream's tool calls, by content block index, from their start to their stop."""

    def __init__(self) -> None:
        self._open: dict[int, ToolCall] = {}
        self._input_chars = 0

    def start(self, index: int, call_id: str | None, name: str | None) -> Failure | None:
        """Open a call; a Failure when too many are open."""
        if index not in self._open and len(self._open) >= MAX_OPEN_TOOL_CALLS:
            return Failure(UpstreamError(f"the provider opened more than {MAX_OPEN_TOOL_CALLS} tool calls at once"))
        self._open[index] = ToolCall(call_id, name)
        return None

    def add(self, index: int, fragment: str) -> Failure | None:
        """A fragment of an open call's input (ignored for no open call); a Failure past the bound."""
        call = self._open.get(index)
        if call is None:
            return None
        self._input_chars += len(fragment)
        if self._input_chars > MAX_TOOL_INPUT_CHARS:
            return Failure(UpstreamError(f"the provider's tool call input is longer than {MAX_TOOL_INPUT_CHARS} "
                                         "characters"))
        call.fragments.append(fragment)
        return None

    def stop(self, index: int) -> ToolCall | None:
        """The finished call at ``index``, if one was open there."""
        return self._open.pop(index, None)


class JsonEventDecoder:
    """SSE events whose data is a JSON object, each mapped to items by ``on_object``.

    Subclasses implement ``on_object(value)`` and ``at_end()`` (what the end of the body
    means: Done if the answer was complete, else a Failure). After a Done or Failure
    nothing more is decoded. No provider's decoder reads an event's name (each names its
    kind in the data, if at all), so only the data is decoded (``SSEDecoder.feed_data``).
    """

    sse_decoder: type[SSEDecoder] = SSEDecoder

    def __init__(self) -> None:
        self._sse = self.sse_decoder()
        self._ended = False

    def feed(self, data: bytes) -> list[StreamItem]:
        if self._ended:
            return []
        items: list[StreamItem] = []
        for payload in self._events(data):
            for item in self._on_event(payload):
                items.append(item)
                if type(item) is Done or type(item) is Failure:
                    self._ended = True
                    return items
        return items

    def finish(self) -> list[StreamItem]:
        if self._ended:
            return []
        self._ended = True
        return [self.at_end()]

    def _events(self, data: bytes) -> list[bytes]:
        """The JSON text of every event ``data`` completes, as the bytes it came as."""
        return self._sse.feed_data(data)

    def _on_event(self, payload: bytes) -> Iterable[StreamItem]:
        try:
            value = loads_json(payload)
        except ValueError:
            # Maybe JSON once bytes that are not UTF-8 are replaced, as SSE text decoding does.
            try:
                value = loads_json(payload.decode("utf-8", "replace"))
            except ValueError:
                return [Failure(UpstreamError("the provider sent a stream event that is not JSON"))]
        if type(value) is not dict:
            return [Failure(UpstreamError("the provider sent a stream event that is not a JSON object"))]
        return self.on_object(value)

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        raise NotImplementedError

    def at_end(self) -> StreamItem:
        raise NotImplementedError


# A JSON line longer than this is a broken or hostile stream, not a token.
MAX_JSON_LINE_BYTES = 1024 * 1024


class JsonLinesDecoder(JsonEventDecoder):
    """Newline-delimited JSON objects (``application/jsonlines``), each mapped by
    ``on_object(value)``; blank lines are skipped."""

    max_line_bytes = MAX_JSON_LINE_BYTES

    def __init__(self) -> None:
        super().__init__()
        self._partial: list[bytes] = []  # the pieces of the unterminated line (joined once, at its end)
        self._partial_bytes = 0

    def _events(self, data: bytes) -> list[bytes]:
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join([*self._partial, lines[0]])
            self._partial, self._partial_bytes = [], 0
        if rest:
            self._partial.append(rest)
            self._partial_bytes += len(rest)
        if self._partial_bytes > self.max_line_bytes or any(len(line) > self.max_line_bytes for line in lines):
            raise ProtocolError(f"a JSON line longer than {self.max_line_bytes} bytes")
        return [line for line in lines if line.strip()]

    def finish(self) -> list[StreamItem]:
        if self._ended or not b"".join(self._partial).strip():
            return super().finish()
        items = self.feed(b"\n")  # the last line needs no newline
        return items if self._ended else items + super().finish()


# A chat stream's usage: OpenAI's names, as the chat completions schema has them.
CHAT_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
_DONE_MARKER = b"[DONE]"


class ChatChunks:
    """A chat.completion.chunk stream (OpenAI's, TGI's and LMI's chat schema) as values, mixed
    into a ``JsonEventDecoder``: content is Delta(text), ``reasoning_content`` Reasoning, tool-call
    deltas assembled into one Delta per call (OpenAI's shape) when the choice finishes; Done at
    ``[DONE]`` or at the body's end after a finish_reason, with the last chunk's usage
    (CHAT_USAGE_FIELDS)."""

    def __init__(self) -> None:
        super().__init__()
        self._finish_reason: str | None = None
        self._usage: dict[str, int | None] | None = None
        self._tokens: TokenCounts | None = None
        self._tools = ToolCalls()
        self._open_calls: list[int] = []
        self._response: tuple[str | None, str | None] | None = None  # the first chunk's id and model

    def feed(self, data: bytes) -> list[StreamItem]:
        """``JsonEventDecoder.feed`` with its hot path in one frame: a chunk that holds text
        and nothing else this decoder reads (every chunk but the first and the last; a role
        is ignored either way) is its Delta here, with no call per chunk; any other event
        goes the common way."""
        if self._ended:  # type: ignore[has-type]
            return []
        items: list[StreamItem] = []
        for payload in self._events(data):  # type: ignore[attr-defined]
            if payload == _DONE_MARKER:
                items.append(self._done())
                self._ended = True
                return items
            try:
                value = loads_json(payload)
            except ValueError:
                value = None  # _on_event tells why
            if type(value) is dict and self._response is not None:
                choices = value.get("choices")
                if type(choices) is list and len(choices) == 1 and value.get("usage") is None \
                        and value.get("error") is None:
                    choice = choices[0]
                    if type(choice) is dict and choice.get("finish_reason") is None:
                        delta = choice.get("delta")
                        if type(delta) is dict and delta.get("tool_calls") is None \
                                and delta.get("reasoning_content") is None:
                            piece = delta.get("content")
                            if type(piece) is str:
                                if piece:
                                    items.append(Delta(piece))
                                continue
            mapped = self.on_object(value) if type(value) is dict else self._on_event(payload)  # type: ignore[attr-defined]
            for item in mapped:
                items.append(item)
                if type(item) is Done or type(item) is Failure:
                    self._ended = True
                    return items
        return items

    def on_object(self, value: dict[str, Any]) -> Iterable[StreamItem]:
        if value.get("error") is not None:
            error = value["error"]
            message = error.get("message") if isinstance(error, dict) else error
            return [Failure(UpstreamError(f"Error from remote service: {str(message)[:500]}"))]
        if self._response is None:
            self._response = (text(value.get("id")), text(value.get("model")))
        if isinstance(value.get("usage"), dict):
            self._usage = counts(value["usage"], CHAT_USAGE_FIELDS)
            self._tokens = token_counts(value["usage"])
        choices = value.get("choices")
        if not isinstance(choices, list) or not choices:
            return ()
        choice = json_object(choices[0])
        delta = json_object(choice.get("delta"))
        items: list[StreamItem] = []
        if piece := text(delta.get("content")):
            items.append(Delta(piece))
        if thought := text(delta.get("reasoning_content")):
            items.append(Reasoning(thought))
        for call in delta.get("tool_calls") or () if isinstance(delta.get("tool_calls"), list) else ():
            failure = self._tool_delta(json_object(call))
            if failure is not None:
                return [*items, failure]
        if finish := text(choice.get("finish_reason")):
            self._finish_reason = finish
            items += self._finished_calls()
        return items

    def _tool_delta(self, call: dict[str, Any]) -> Failure | None:
        index = count(call.get("index")) or 0
        function = json_object(call.get("function"))
        if index not in self._open_calls:
            self._open_calls.append(index)
            failure = self._tools.start(index, text(call.get("id")), text(function.get("name")))
            if failure is not None:
                return failure
        arguments = text(function.get("arguments"))
        return self._tools.add(index, arguments) if arguments else None

    def _finished_calls(self) -> list[StreamItem]:
        items: list[StreamItem] = []
        for index in self._open_calls:
            call = self._tools.stop(index)
            tool_input = call.input() if call is not None else None
            if isinstance(tool_input, Failure):
                return [tool_input]
            if call is not None:
                items.append(Delta({"type": "function", "id": call.call_id or f"call_{index}",
                                    "function": {"name": call.name, "arguments": tool_input}}))
        self._open_calls = []
        return items

    def _done(self) -> StreamItem:
        response_id, response_model = self._response or (None, None)
        return Done(self._finish_reason, self._usage, self._tokens, response_id, response_model)

    def at_end(self) -> StreamItem:
        if self._finish_reason is None:
            return Failure(UpstreamError("the model's chat stream ended before a finish_reason"))
        return self._done()
