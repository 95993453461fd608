"""The decoder paths the Anthropic and Responses fronts read, pure and split at every
offset: an OpenAI chat stream read whole (StreamKind.CHAT: text, tool calls assembled,
usage) and an Anthropic stream relayed (StreamKind.RELAY: every event whole)."""

from __future__ import annotations

import json

import pytest

from mlstream.providers import StreamKind
from mlstream.providers.anthropic import ANTHROPIC_MESSAGES
from mlstream.providers.common import JsonEventDecoder
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


def comparable(items: list) -> list:
    """Items with each Failure as its error's type and reason (exceptions compare by identity)."""
    return [(type(item.error), item.error.reason) if isinstance(item, Failure) else item for item in items]


class OneWayChatDecoder(OpenAIChatDecoder):
    """Every event through ``on_object``: what the hot path in ``feed`` must agree with."""

    feed = JsonEventDecoder.feed


def event(value: object) -> bytes:
    return b"data: " + json.dumps(value).encode() + b"\n\n"


TEXT_CHOICE = {"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}
# Chunks after the first (whose id and model the decoder keeps): the hot path's edges.
FAST_PATH_EDGES = {
    "text": {"choices": [TEXT_CHOICE]},
    "text and role": {"choices": [{**TEXT_CHOICE, "delta": {"role": "assistant", "content": "x"}}]},
    "empty text": {"choices": [{**TEXT_CHOICE, "delta": {"content": ""}}]},
    "no text": {"choices": [{**TEXT_CHOICE, "delta": {"content": None}}]},
    "text not a string": {"choices": [{**TEXT_CHOICE, "delta": {"content": 5}}]},
    "no delta": {"choices": [{"index": 0, "finish_reason": None}]},
    "delta not an object": {"choices": [{**TEXT_CHOICE, "delta": "x"}]},
    "reasoning": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "reasoning_content": "r"}}]},
    "empty reasoning": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "reasoning_content": ""}}]},
    "null reasoning": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "reasoning_content": None}}]},
    "null tool calls": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "tool_calls": None}}]},
    "empty tool calls": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "tool_calls": []}}]},
    "tool call": {"choices": [{**TEXT_CHOICE, "delta": {"content": "x", "tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}]}}]},
    "finish": {"choices": [{**TEXT_CHOICE, "finish_reason": "length"}]},
    "empty finish": {"choices": [{**TEXT_CHOICE, "finish_reason": ""}]},
    "usage": {"choices": [TEXT_CHOICE], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
    "null usage": {"choices": [TEXT_CHOICE], "usage": None},
    "null error": {"choices": [TEXT_CHOICE], "error": None},
    "error": {"choices": [TEXT_CHOICE], "error": {"message": "boom"}},
    "two choices": {"choices": [TEXT_CHOICE, {**TEXT_CHOICE, "index": 1}]},
    "no choices": {"choices": []},
    "choice not an object": {"choices": ["x"]},
    "more fields": {"id": "other", "model": "m2", "obfuscation": "abc", "service_tier": "default",
                    "choices": [TEXT_CHOICE]},
    "not an object": ["x"],
}


@pytest.mark.parametrize("name", FAST_PATH_EDGES)
def test_the_hot_path_decodes_as_the_whole_decoder_does(name):
    stream = (event({"id": "c-1", "model": "m", "choices": [{**TEXT_CHOICE, "delta": {"role": "assistant"}}]})
              + event(FAST_PATH_EDGES[name]) + event({"choices": [{**TEXT_CHOICE, "finish_reason": "stop"}]}))
    expected = comparable(feed_all(OneWayChatDecoder(), stream, []))
    for cut in range(len(stream) + 1):
        items = feed_all(OpenAIChatDecoder(), stream, [cut])
        assert comparable(items) == expected, cut
        done = items[-1]
        if isinstance(done, Done):
            assert (done.response_id, done.response_model) == ("c-1", "m")


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
