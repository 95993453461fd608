"""The decoder paths the Anthropic and Responses fronts read, pure and split at every
offset: an OpenAI chat stream read whole (StreamKind.CHAT: text, tool calls assembled,
usage) and an Anthropic stream relayed (StreamKind.RELAY: every event whole)."""

from __future__ import annotations

import json

import pytest

from mlstream.providers import StreamKind
from mlstream.providers.anthropic import ANTHROPIC_MESSAGES
from mlstream.providers.events import Chunk, Delta, Done, Failure, Reasoning
from mlstream.providers.openai import (
    OPENAI_CHAT,
    OPENAI_COMPLETIONS,
    OpenAIChatDecoder,
    OpenAIStreamDecoder,
)

from ..support.decoders import (
    ANTHROPIC_STREAM,
    anthropic_error,
    anthropic_event,
    feed_all,
)


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    choices = [] if delta is None and finish is None else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": choices,
                                   **({"usage": usage} if usage else {})}).encode() + b"\n\n"


USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13,
         "prompt_tokens_details": {"cached_tokens": 0}}
OPENAI_CHAT_STREAM = b"".join([
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Hmm."}),
    chunk({"content": "To be"}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "lookup", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "Ham'}}]}),
    chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                           "function": {"name": "other", "arguments": "{}"}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'let"}'}}]}),
    chunk({}, finish="tool_calls"),
    chunk(usage=USAGE),
    b"data: [DONE]\n\n",
])
OPENAI_CHAT_EXPECTED = [
    Reasoning("Hmm."), Delta("To be"),
    Delta({"type": "function", "id": "call_1", "function": {"name": "lookup", "arguments": {"q": "Hamlet"}}}),
    Delta({"type": "function", "id": "call_2", "function": {"name": "other", "arguments": {}}}),
    Done("tool_calls", {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
]


def test_the_openai_chat_dialect_reads_chat_streams_whole():
    assert isinstance(OPENAI_CHAT.new_decoder(StreamKind.CHAT), OpenAIChatDecoder)
    assert isinstance(OPENAI_CHAT.new_decoder(StreamKind.TEXT), OpenAIStreamDecoder)  # unchanged
    assert isinstance(OPENAI_COMPLETIONS.new_decoder(StreamKind.CHAT), OpenAIStreamDecoder)  # no chat schema


def test_openai_chat_stream_split_at_every_offset():
    for cut in range(len(OPENAI_CHAT_STREAM) + 1):
        assert feed_all(OpenAIChatDecoder(), OPENAI_CHAT_STREAM, [cut]) == OPENAI_CHAT_EXPECTED, cut


@pytest.mark.parametrize("data, reason", [
    (chunk({"content": "a"}), "before a finish_reason"),
    (b'data: {"error": {"message": "overloaded"}}\n\n', "overloaded"),
    (chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}]})
     + chunk({}, finish="tool_calls"), "not a JSON object"),
], ids=["no-finish", "error-event", "bad-arguments"])
def test_openai_chat_stream_failures(data, reason):
    items = feed_all(OpenAIChatDecoder(), data, [])
    assert isinstance(items[-1], Failure) and reason in items[-1].error.reason, items


def relayed_events() -> list[str]:
    """ANTHROPIC_STREAM's events as the relay passes them: all but ping and message_stop."""
    events = [block.split(b"\ndata: ", 1)[1].decode() for block in ANTHROPIC_STREAM.split(b"\n\n") if block]
    return [data for data in events if json.loads(data)["type"] not in ("ping", "message_stop")]


def test_anthropic_relay_split_at_every_offset():
    expected = [*map(Chunk, relayed_events()), Done("tool_use", {"input_tokens": 12, "output_tokens": 30})]
    assert any('"signature_delta"' in item.data for item in expected[:-1])  # thinking kept whole
    for cut in range(0, len(ANTHROPIC_STREAM) + 1, 7):
        assert feed_all(ANTHROPIC_MESSAGES.new_decoder(StreamKind.RELAY), ANTHROPIC_STREAM, [cut]) == expected, cut


@pytest.mark.parametrize("data, status", [
    (anthropic_error("overloaded_error"), 503),
    (anthropic_event("message_start", {"type": "message_start", "message": {}}), 502),
], ids=["error-event", "no-message-stop"])
def test_anthropic_relay_failures(data, status):
    items = feed_all(ANTHROPIC_MESSAGES.new_decoder(StreamKind.RELAY), data, [])
    assert isinstance(items[-1], Failure) and items[-1].error.http_status == status
