"""OpenAI chat completions and legacy text completions, streamed as SSE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..models.connectors import Connector, UpstreamRequest
from ..errors import UpstreamError
from ..speedups import loads_json
from ..wire.sse import SSEDecoder
from ..usage.tokens import TokenCounts, token_counts
from .common import ChatChunks, JsonEventDecoder
from .common import count as _count, encode_body as _encode_body, json_object_body as _json_object_body
from .common import text as _text
from .base import StreamKind
from .events import Chunk, Delta, Done, Failure, StreamItem

_DONE_MARKER = b"[DONE]"
# The usage the stream's final event carries: OpenAI's own names, as its non-stream
# answer has them (nested details and any other field are not relayed).
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


@dataclass(frozen=True, slots=True)
class OpenAIDialect:
    name: str
    # chat completions carry text in choices[0].delta.content, legacy ones in choices[0].text
    chat: bool

    def stream_request(self, request: UpstreamRequest, connector: Connector,
                       parameters: Mapping[str, Any]) -> UpstreamRequest:
        body = _json_object_body(request)
        body["stream"] = True
        # Usage costs the provider an extra chunk; ask for it only if the caller did.
        if "stream_options" not in body and isinstance(parameters.get("stream_options"), dict):
            body["stream_options"] = parameters["stream_options"]
        headers = dict(request.headers)
        headers.setdefault("Accept", "text/event-stream")
        # (dataclasses.replace looks the fields up on every call: a third of this method)
        return UpstreamRequest(request.method, request.url, headers, _encode_body(body))

    def new_decoder(self, kind: StreamKind = StreamKind.TEXT) -> "OpenAIStreamDecoder | OpenAIChatDecoder":
        """RELAY (the OpenAI front): every chunk relayed whole (``Chunk``), not just its text.
        CHAT (a front translating to chat completions): text, reasoning, whole tool calls and
        usage (``common.ChatChunks``)."""
        if kind is StreamKind.CHAT and self.chat:
            return OpenAIChatDecoder()
        return OpenAIStreamDecoder(self.chat, relay=kind is StreamKind.RELAY)


OPENAI_CHAT = OpenAIDialect("openai/v1/chat/completions", chat=True)
OPENAI_COMPLETIONS = OpenAIDialect("openai/v1/completions", chat=False)


class OpenAIStreamDecoder:
    """OpenAI's SSE chunks to values: one Delta per non-empty text (or, relaying, one
    Chunk per chunk), Done at [DONE].

    Relaying, an opening chunk that only says the role is held and put out with the next
    item: the client gets role and first token in one write, not two hand-overs apart.
    """

    def __init__(self, chat: bool, relay: bool = False) -> None:
        self._chat = chat
        self._relay = relay
        self._sse = SSEDecoder()
        self._finish_reason: str | None = None
        self._usage: dict[str, int] | None = None
        self._tokens: TokenCounts | None = None
        self._response: tuple[str | None, str | None] | None = None  # the first chunk's id and model
        self._ended = False
        self._opening = relay          # relaying, and no chunk seen yet
        self._held: Chunk | None = None  # the role-only opening chunk, until the next item

    def feed(self, data: bytes) -> list[StreamItem]:
        items: list[StreamItem] = []
        for event in self._sse.feed_data(data):
            item = self._on_event(event)
            if item is not None:
                if self._held is not None and not isinstance(item, Failure):
                    items.append(self._held)
                self._held = None
                items.append(item)
                if isinstance(item, (Done, Failure)):
                    self._ended = True
                    break
        return items

    def finish(self) -> list[StreamItem]:
        if self._ended:
            return []
        self._ended = True
        return [Failure(UpstreamError("the provider ended the stream before [DONE]"))]

    def _on_event(self, data: bytes) -> StreamItem | None:
        if data == _DONE_MARKER:
            response_id, response_model = self._response or (None, None)
            return Done(self._finish_reason, self._usage, self._tokens, response_id, response_model)
        text: str | bytes = data
        try:
            chunk = loads_json(data)  # the event's bytes: no decoding to text first
        except ValueError:
            # Maybe JSON once bytes that are not UTF-8 are replaced, as SSE text decoding does.
            text = data.decode("utf-8", "replace")
            try:
                chunk = loads_json(text)
            except ValueError:
                return Failure(UpstreamError("the provider sent a stream event that is not JSON"))
        if not isinstance(chunk, dict):
            return Failure(UpstreamError("the provider sent a stream event that is not a JSON object"))
        if chunk.get("error") is not None:
            return Failure(UpstreamError(f"the provider failed mid-stream: {_error_message(chunk['error'])}"))
        if self._response is None:
            self._response = (_text(chunk.get("id")), _text(chunk.get("model")))
        if self._relay:
            if "usage" in chunk:  # the last chunk, when the client asked for include_usage
                self._tokens = token_counts(chunk["usage"])
            choices = chunk.get("choices")  # the finish reason too, for the call's span
            if choices and isinstance(choices, list) and isinstance(choices[0], dict):
                self._finish_reason = choices[0].get("finish_reason") or self._finish_reason
            # Relayed as it came: bytes that decoded as JSON are valid UTF-8, so they are
            # the very bytes that decoding them to text and encoding it again would give.
            if self._opening:
                self._opening = False
                if _role_only(chunk):
                    self._held = Chunk(text)
                    return None
            return Chunk(text)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = {name: _count(usage.get(name)) for name in USAGE_FIELDS}
            self._tokens = token_counts(usage)
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        if choice.get("finish_reason"):
            self._finish_reason = choice["finish_reason"]
        if self._chat:
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
        else:
            text = choice.get("text")
        return Delta(text) if isinstance(text, str) and text else None


class OpenAIChatDecoder(ChatChunks, JsonEventDecoder):
    """A chat completions stream read whole (the Anthropic and Responses fronts over an
    OpenAI-interface model): tool calls assembled, usage kept (the front asks for it with
    ``stream_options.include_usage``)."""


def _role_only(chunk: dict[str, Any]) -> bool:
    """A chunk whose one choice's delta says nothing but the role (OpenAI's opening chunk)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    return (isinstance(delta, dict) and "role" in delta and not delta.get("content")
            and set(delta) <= {"role", "content", "refusal"} and not delta.get("refusal")
            and not choices[0].get("finish_reason") and not chunk.get("usage"))


def _error_message(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    return str(error)[:500]
