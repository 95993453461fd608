"""The OpenAI front's pure parts: request checks, the Converse translation both ways, the
chunk events (``fronts.openai.events``) and the error body (``fronts.openai.errors``). Table-tested, and
the translation fuzzed: whatever JSON comes in, only its own refusal (InvalidField) comes out."""

from __future__ import annotations

import base64
import itertools
import json
import struct

import pytest
from hypothesis import given

from mlstream.errors import (
    BadRequest,
    InvalidField,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from mlstream.fronts.openai import converse, wire
from mlstream.fronts.openai import errors as openai_errors
from mlstream.fronts.openai.events import DONE_EVENT, OpenAIChatEvents
from mlstream.providers.events import Chunk, Done, Failure
from mlstream.providers.openai import OpenAIStreamDecoder

from ..support.fuzz import fuzz
from ..support.openai_wire import bodies, events_of


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}]},
     "messages[0].tool_calls"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code"}]}, "tools[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "user", "content": "x"}], "audio": {}}, "audio"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
])
def test_converse_refusals_name_the_field(body, param):
    with pytest.raises(InvalidField) as refused:
        converse.converse_request(body)
    assert refused.value.param == param and refused.value.http_status == 400


def test_converse_request_merges_turns_and_maps_tool_choice():
    body = {"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                         {"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}}, "user": "ignored", "seed": 1}
    assert converse.converse_request(body) == {
        "messages": [{"role": "user", "content": [{"text": "one"}, {"text": "two"}]}],
        "system": [{"text": "a"}, {"text": "b"}],
        "toolConfig": {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
                       "toolChoice": {"tool": {"name": "f"}}}}
    assert "toolConfig" not in converse.converse_request({**body, "tool_choice": "none"})
    jpeg = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpg;base64,AA=="}}]}]}
    assert converse.converse_request(jpeg)["messages"][0]["content"] == [
        {"image": {"format": "jpeg", "source": {"bytes": "AA=="}}}]


@pytest.mark.parametrize("given, texts", [("a", ["a"]), (["a", "b"], ["a", "b"])])
def test_embedding_input(given, texts):
    assert wire.check_embedding_input({"input": given}) == texts


@pytest.mark.parametrize("given", [[1, 2], [[1, 2]], [], None, [""], 3, ["a", 1]])
def test_embedding_input_refused(given):
    with pytest.raises(InvalidField) as refused:
        wire.check_embedding_input({"input": given})
    assert refused.value.param == "input"


def test_embedding_base64_is_little_endian_float32():
    encoded = wire.embedding_base64([1.0, -0.5])
    assert struct.unpack("<2f", base64.b64decode(encoded)) == (1.0, -0.5)


def test_overlay_the_client_wins_and_never_sets_model_or_stream():
    fields = wire.client_fields({"model": "mine", "stream": True, "temperature": 1, "messages": []})
    assert wire.overlay({"model": "gpt-4o", "temperature": 0, "max_tokens": 5}, fields) == {
        "model": "gpt-4o", "temperature": 1, "max_tokens": 5, "messages": []}


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("usage, expected", [
    ({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}, (3, 4, 7)),
    ({"input_tokens": 1, "output_tokens": 2}, (1, 2, 3)),
    ({"promptTokenCount": 5, "candidatesTokenCount": 1, "totalTokenCount": 6}, (5, 1, 6)),
    ({"input_length": None, "generated_tokens": 9}, (0, 9, 9)),
])
def test_usage_names(usage, expected):
    counted = wire.openai_usage(usage)
    assert (counted["prompt_tokens"], counted["completion_tokens"], counted["total_tokens"]) == expected


@pytest.mark.parametrize("reason, expected", [("end_turn", "stop"), ("max_tokens", "length"),
                                              ("tool_use", "tool_calls"), ("guardrail_intervened", "content_filter"),
                                              ("MAX_TOKENS", "length"), (None, None), ("novel", "novel")])
def test_finish_reasons(reason, expected):
    assert wire.finish_reason(reason) == expected


def test_chat_completion_from_converse():
    answer = {"output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "hmm"}}}, {"text": "Hi"},
        {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}}]}},
        "stopReason": "tool_use", "usage": {"inputTokens": 2, "outputTokens": 3, "totalTokens": 5}}
    completion = converse.chat_completion_from_converse(answer, completion_id="c", created=1, model="m")
    assert completion["choices"][0] == {"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Hi", "refusal": None, "reasoning_content": "hmm",
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}}
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    empty = converse.chat_completion_from_converse(None, completion_id="c", created=1, model="m")
    assert empty["choices"][0]["message"]["content"] == "" and "usage" not in empty


# --------------------------------------------------------------------------- stream events


def test_translated_stream_events():
    events = OpenAIChatEvents(completion_id="c1", created=9, model="m", include_usage=True, relay=False)
    data = (events.content("He") + events.content('said "hi"') + events.reasoning("think")
            + events.content({"toolUse": {"toolUseId": "t", "name": "f", "input": {"x": 1}}})
            + events.last("tool_use", {"inputTokens": 1, "outputTokens": 2}))
    chunks = events_of(data)
    assert chunks[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "He"}, {"content": 'said "hi"'},
                      {"reasoning_content": "think"},
                      {"tool_calls": [{"index": 0, "id": "t", "type": "function",
                                       "function": {"name": "f", "arguments": ""}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}, {}]
    assert all(c["id"] == "c1" and c["object"] == "chat.completion.chunk" and c["usage"] is None
               for c in chunks[:-2])
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-2] == {"id": "c1", "object": "chat.completion.chunk", "created": 9, "model": "m", "choices": [],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}


def test_translated_stream_without_usage_and_without_content():
    events = OpenAIChatEvents(completion_id="c", created=0, model="m", include_usage=False, relay=False)
    chunks = events_of(events.last(None, None))
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [{"role": "assistant", "content": ""}, {}]
    assert chunks[1]["choices"][0]["finish_reason"] == "stop" and "usage" not in chunks[1]


def test_relayed_stream_events_pass_the_chunk_through():
    events = OpenAIChatEvents(completion_id="", created=0, model="m", include_usage=True, relay=True)
    assert events.relayed('{"a":"é"}') == 'data: {"a":"é"}\n\n'.encode()
    assert events.last("stop", {"prompt_tokens": 1}) == DONE_EVENT
    failure = events_of(events.error(UpstreamError("the provider failed mid-stream: boom")))
    assert failure == [{"error": {"message": "the provider failed mid-stream: boom", "type": "server_error",
                                  "param": None, "code": None}}]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("error, status, kind, code", [
    (BadRequest("x"), 400, "invalid_request_error", None),
    (Unauthorized("x"), 401, "authentication_error", "invalid_api_key"),
    (ModelNotFound("x"), 404, "invalid_request_error", "model_not_found"),
    (Overloaded("x"), 429, "rate_limit_error", "rate_limit_exceeded"),
    (UpstreamError("x", upstream_status=500), 502, "server_error", None),
    (UpstreamTimeout("x"), 504, "server_error", None),
    (ValueError("a bug with a secret"), 500, "server_error", None),
])
def test_error_bodies(error, status, kind, code):
    reply = openai_errors.error_reply(error)
    assert reply.status == status
    assert reply.body["error"]["type"] == kind and reply.body["error"]["code"] == code
    assert "secret" not in reply.body["error"]["message"]
    assert set(reply.body["error"]) == {"message", "type", "param", "code"}


# --------------------------------------------------------------------------- fuzz

@given(body=bodies)
@fuzz(300)
def test_converse_translation_only_refuses_with_invalid_field(body):
    try:
        fields = converse.converse_request(body)
    except InvalidField:
        return
    json.dumps(fields)  # what is sent is JSON
    roles = [m["role"] for m in fields["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))  # alternating turns


# --------------------------------------------------------------------------- the relay decoder

ROLE = '{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
TOKEN = '{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'


def sse(*events: str) -> bytes:
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events)


def test_relay_decoder_holds_the_role_chunk_until_the_next_item():
    decoder = OpenAIStreamDecoder(chat=True, relay=True)
    assert decoder.feed(sse(ROLE)) == []
    # relayed as the provider's bytes (valid UTF-8: they decoded as JSON)
    assert decoder.feed(sse(TOKEN)) == [Chunk(ROLE.encode()), Chunk(TOKEN.encode())]
    assert decoder.feed(sse(TOKEN, "[DONE]")) == [Chunk(TOKEN.encode()), Done(None, None)]
    only_role = OpenAIStreamDecoder(chat=True, relay=True)
    assert only_role.feed(sse(ROLE, "[DONE]")) == [Chunk(ROLE.encode()), Done(None, None)]
    failed = OpenAIStreamDecoder(chat=True, relay=True)
    items = failed.feed(sse(ROLE, '{"error": {"message": "boom"}}'))
    assert len(items) == 1 and isinstance(items[0], Failure)
    # a first chunk that carries more than the role goes out at once
    assert OpenAIStreamDecoder(chat=True, relay=True).feed(sse(TOKEN)) == [Chunk(TOKEN.encode())]


def test_relay_decoder_gives_bytes_that_are_not_utf8_as_the_text_sse_decoding_gives():
    bad = b'{"choices":[{"index":0,"delta":{"content":"a\xffb"}}]}'
    decoder = OpenAIStreamDecoder(chat=True, relay=True)
    for feed in (b"data: " + sse(TOKEN)[6:], b"data: " + bad + b"\n\n"):  # the first feed, then the fast path
        *_, item = decoder.feed(feed)
    data = item.data
    assert (data if isinstance(data, bytes) else data.encode()) == bad.decode("utf-8", "replace").encode()
