"""The Anthropic front's wire shapes and stream events, pure: a Messages request as a chat
request (table), a chat answer as a message, the SSE sequence the SDK assembles."""

from __future__ import annotations

import json

import pytest

from mlstream.errors import InvalidField, UpstreamError
from mlstream.fronts.anthropic import wire
from mlstream.fronts.anthropic.events import MessagesEvents
from mlstream.fronts.chat import ChatAnswer

BASE = {"model": "m", "max_tokens": 10}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}

CASES = [
    ("text", {"messages": [{"role": "user", "content": "Hi"}]},
     {"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 10}),
    ("system-blocks", {"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B",
                                                                  "cache_control": {"type": "ephemeral"}}],
                       "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
     {"messages": [{"role": "system", "content": "A\n\nB"}, {"role": "user", "content": "Hi"}],
      "max_completion_tokens": 10}),
    ("image", {"messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, IMAGE]}]},
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, {
         "type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]}], "max_completion_tokens": 10}),
    ("tools-round-trip", {"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": [{"type": "text", "text": "down"}]}]}],
        "tools": [{"name": "w", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "tool", "name": "w"}},
     {"messages": [{"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"c": "Oslo"}'}}]},
                   {"role": "tool", "tool_call_id": "t1", "content": "Error: down"}],
      "max_completion_tokens": 10,
      "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "function", "function": {"name": "w"}}}),
    ("sampling", {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "top_p": 0.5, "top_k": 3,
                  "stop_sequences": ["X"], "metadata": {"user_id": "u"}, "thinking": {"type": "adaptive"},
                  "tool_choice": {"type": "auto"}},
     {"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 10, "temperature": 0, "top_p": 0.5,
      "stop": ["X"], "user": "u"}),
    ("system-in-conversation", {"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "system", "content": "Mind the date."}]},
     {"messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Mind the date."}],
      "max_completion_tokens": 10}),
]


@pytest.mark.parametrize("request_body, chat", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_chat_request(request_body, chat):
    assert wire.chat_request({**BASE, **request_body}) == chat


@pytest.mark.parametrize("request_body, param", [
    ({"model": "m", "messages": []}, "max_tokens"),
    ({**BASE, "messages": "Hi"}, "messages"),
    ({**BASE, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "document"}]}]}, "messages.0.content.0"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url",
                                                                                       "url": "http://x"}}]}]},
     "messages.0.content.0.source"),
    ({**BASE, "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0"),
    ({**BASE, "messages": [], "frobnicate": 1}, "frobnicate"),
    ({**BASE, "messages": [], "tool_choice": {"type": "maybe"}}, "tool_choice"),
], ids=["no-max-tokens", "messages-not-a-list", "bad-role", "document", "http-image", "server-tool", "unknown",
        "bad-tool-choice"])
def test_refusals_name_the_field(request_body, param):
    with pytest.raises(InvalidField) as refused:
        wire.chat_request(request_body)
    assert refused.value.param == param


def test_message_from_a_chat_answer():
    answer = ChatAnswer("Hello", "Hmm", (("call_1", "w", '{"c": "Oslo"}'),), "stop",
                        {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12})
    assert wire.message(answer, message_id="msg_1", model="m") == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "thinking", "thinking": "Hmm", "signature": ""}, {"type": "text", "text": "Hello"},
                    {"type": "tool_use", "id": "call_1", "name": "w", "input": {"c": "Oslo"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 7}}


@pytest.mark.parametrize("finish, stop", [("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"),
                                          ("content_filter", "refusal"), (None, "end_turn")])
def test_stop_reasons(finish, stop):
    assert wire.stop_reason(finish) == stop


def parse(data: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in data.decode().split("\n\n"):
        if block:
            name, payload = block.split("\n", 1)
            events.append((name.removeprefix("event: "), json.loads(payload.removeprefix("data: "))))
    return events


def test_translated_stream_events():
    events = MessagesEvents(message_id="msg_1", model="m", relay=False)
    data = (events.reasoning("Hmm") + events.content("To be") + events.content(", or not")
            + events.content({"toolUse": {"toolUseId": "t1", "name": "w", "input": {"c": "Oslo"}}})
            + events.last("tool_use", {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}))
    got = parse(data)
    assert [name for name, _ in got] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert all(body["type"] == name for name, body in got)
    assert got[0][1]["message"]["id"] == "msg_1" and got[0][1]["message"]["model"] == "m"
    assert [body.get("index") for name, body in got if name.startswith("content_block")] == [0, 0, 0, 1, 1, 1, 1,
                                                                                            2, 2, 2]
    assert got[8][1]["content_block"] == {"type": "tool_use", "id": "t1", "name": "w", "input": {}}
    assert got[9][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"c":"Oslo"}'}
    assert got[11][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert got[11][1]["usage"] == {"input_tokens": 5, "output_tokens": 7}


def test_a_failure_is_an_error_event_and_no_message_stop():
    events = MessagesEvents(message_id="msg_1", model="m", relay=False)
    data = events.content("To be") + events.error(UpstreamError("the provider failed mid-stream"))
    got = parse(data)
    assert got[-1] == ("error", {"type": "error", "error": {"type": "api_error",
                                                            "message": "the provider failed mid-stream"}})
    assert "message_stop" not in [name for name, _ in got]


def test_relayed_events_keep_their_data_and_name_their_type():
    events = MessagesEvents(message_id="", model="m", relay=True)
    data = '{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}'
    assert events.relayed(data) == b"event: content_block_delta\ndata: " + data.encode() + b"\n\n"
    assert events.relayed('{"index": 0, "type": "content_block_stop"}').startswith(b"event: content_block_stop\n")
    assert events.last("end_turn", None) == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def test_count_tokens_estimate():
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 40}], "system": "y" * 8}
    chars = len(json.dumps(body["messages"], separators=(",", ":"))) + 8
    assert wire.estimate_tokens(body) == -(-chars // wire.CHARS_PER_TOKEN)
