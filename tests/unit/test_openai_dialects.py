"""OpenAI chat <-> Anthropic, Gemini and SageMaker chat (``fronts.openai``'s translations), and the
SageMaker chat stream decoders: table-tested, and the request translations fuzzed
(whatever JSON comes in, only their own refusal, InvalidField, comes out)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given

from mlstream.errors import InvalidField, UpstreamError
from mlstream.fronts.openai import anthropic, gemini, sagemaker
from mlstream.fronts.openai.events import OpenAIChatEvents
from mlstream.providers.events import Delta, Done, Failure, Reasoning
from mlstream.providers.sagemaker import LMIChatDecoder, TGIChatDecoder

from ..support.fuzz import fuzz
from ..support.openai_wire import bodies, events_of

USER = [{"role": "user", "content": "hi"}]
FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


# --------------------------------------------------------------------------- Anthropic requests


@pytest.mark.parametrize("extra, expected", [
    ({}, {}),
    ({"max_tokens": 5}, {"max_tokens": 5}),
    ({"max_completion_tokens": 6, "max_tokens": 5}, {"max_tokens": 6}),
    ({"temperature": 0, "top_p": 1}, {"temperature": 0, "top_p": 1}),
    ({"stop": "x"}, {"stop_sequences": ["x"]}),
    ({"stop": ["x", "y"]}, {"stop_sequences": ["x", "y"]}),
    ({"user": "u"}, {"metadata": {"user_id": "u"}}),
    ({"seed": 1, "presence_penalty": 0.1, "store": True, "n": 1}, {}),  # dropped: no place in Anthropic's API
    ({"tools": [FUNCTION]}, {"tools": [{"name": "f", "input_schema": {"type": "object"}}],
                             "tool_choice": {"type": "auto"}}),
    ({"tools": [FUNCTION], "tool_choice": "none"}, {"tools": [{"name": "f", "input_schema": {"type": "object"}}],
                                                    "tool_choice": {"type": "none"}}),
    ({"tools": [FUNCTION], "tool_choice": "required", "parallel_tool_calls": False},
     {"tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}),
    ({"tools": [FUNCTION], "tool_choice": {"type": "function", "function": {"name": "f"}}},
     {"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}}),
])
def test_anthropic_request_fields(extra, expected):
    assert anthropic.anthropic_request({"messages": USER, **extra}) == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], **expected}


def test_anthropic_request_messages():
    body = {"messages": [
        {"role": "developer", "content": "a"}, {"role": "system", "content": [{"type": "text", "text": "b"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpg;base64,AA=="}},
                                     {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "let me", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]}]}
    assert anthropic.anthropic_request(body) == {
        "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AA=="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}},
                {"type": "text", "text": "again"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "let me"},
                                              {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                          "content": [{"type": "text", "text": "42"}]}]}]}


@pytest.mark.parametrize("body, param", [
    ({"messages": USER, "n": 2}, "n"),
    ({"messages": USER, "logprobs": True}, "logprobs"),
    ({"messages": USER, "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": USER, "audio": {}}, "audio"),
    ({"messages": USER, "user": 3}, "user"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "tools": [{"type": "code"}]}, "tools[0]"),
    ({"messages": USER, "tools": [FUNCTION], "tool_choice": "maybe"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
     "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
])
def test_anthropic_refusals_name_the_field(body, param):
    with pytest.raises(InvalidField) as refused:
        anthropic.anthropic_request(body)
    assert refused.value.param == param


@pytest.mark.parametrize("rendered, fields, max_tokens", [
    ({"model": "m", "max_tokens": 10, "messages": []}, {"messages": [1]}, 10),
    ({"model": "m", "max_tokens": 10}, {"messages": [1], "max_tokens": 3}, 3),
    ({"model": "m"}, {"messages": [1]}, anthropic.ANTHROPIC_DEFAULT_MAX_TOKENS),
])
def test_anthropic_body_keeps_the_connectors_fields(rendered, fields, max_tokens):
    body = anthropic.anthropic_body(rendered, fields)
    assert body["model"] == "m" and body["messages"] == [1] and body["max_tokens"] == max_tokens


def test_chat_completion_from_anthropic():
    answer = {"content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "Hi"},
                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}],
              "stop_reason": "tool_use", "usage": {"input_tokens": 2, "output_tokens": 3}}
    completion = anthropic.chat_completion_from_anthropic(answer, completion_id="c", created=1, model="m")
    assert completion["choices"] == [{"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Hi", "refusal": None, "reasoning_content": "hmm",
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}}]
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    for reason, finish in (("end_turn", "stop"), ("max_tokens", "length"), ("stop_sequence", "stop"),
                           ("refusal", "content_filter")):
        answer = {"content": [{"type": "text", "text": "x"}], "stop_reason": reason}
        assert anthropic.chat_completion_from_anthropic(answer, completion_id="c", created=1,
                                                       model="m")["choices"][0]["finish_reason"] == finish


# --------------------------------------------------------------------------- Gemini requests


@pytest.mark.parametrize("extra, expected", [
    ({}, {}),
    ({"max_tokens": 5, "temperature": 0.1, "top_p": 0.2, "stop": "x", "n": 2, "seed": 0,
      "presence_penalty": 0.3, "frequency_penalty": 0.4},
     {"generationConfig": {"maxOutputTokens": 5, "temperature": 0.1, "topP": 0.2, "stopSequences": ["x"],
                           "candidateCount": 2, "seed": 0, "presencePenalty": 0.3, "frequencyPenalty": 0.4}}),
    ({"response_format": {"type": "text"}}, {}),
    ({"response_format": {"type": "json_object"}}, {"generationConfig": {"responseMimeType": "application/json"}}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}}),
    ({"tools": [FUNCTION]}, {"tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
                             "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}}),
    ({"tools": [FUNCTION], "tool_choice": "none"},
     {"tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}),
    ({"tools": [FUNCTION], "tool_choice": "required"},
     {"tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
      "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}),
    ({"user": "u", "parallel_tool_calls": True}, {}),  # dropped
])
def test_gemini_request_fields(extra, expected):
    assert gemini.gemini_request({"messages": USER, **extra}, stream=False) == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}], **expected}


def test_gemini_request_contents():
    body = {"messages": [
        {"role": "system", "content": "a"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/webp;base64,AA=="}}]},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "done"}]}
    assert gemini.gemini_request(body, stream=True) == {
        "systemInstruction": {"parts": [{"text": "a"}]},
        "contents": [
            {"role": "user", "parts": [{"inlineData": {"mimeType": "image/webp", "data": "AA=="}}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"content": "42"}}}]},
            {"role": "model", "parts": [{"text": "done"}]}]}


@pytest.mark.parametrize("body, stream, param", [
    ({"messages": USER, "n": 2}, True, "n"),
    ({"messages": USER, "logprobs": True}, False, "logprobs"),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {}}}, False, "response_format"),
    ({"messages": USER, "audio": {}}, False, "audio"),
    ({"messages": USER, "seed": -1}, False, "seed"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]},
     False, "messages[0].content"),
    ({"messages": [*USER, {"role": "tool", "tool_call_id": "unknown", "content": "42"}]}, False, "messages"),
])
def test_gemini_refusals_name_the_field(body, stream, param):
    with pytest.raises(InvalidField) as refused:
        gemini.gemini_request(body, stream=stream)
    assert refused.value.param == param


def test_gemini_body_merges_generation_config():
    rendered = {"contents": [], "generationConfig": {"temperature": 1, "topK": 3}, "safetySettings": []}
    body = gemini.gemini_body(rendered, {"contents": [1], "generationConfig": {"temperature": 0}})
    assert body == {"contents": [1], "generationConfig": {"temperature": 0, "topK": 3}, "safetySettings": []}


def test_chat_completion_from_gemini():
    answer = {"candidates": [
        {"index": 0, "content": {"role": "model", "parts": [{"text": "hmm", "thought": True}, {"text": "Hi"},
                                                            {"functionCall": {"name": "f", "args": {"a": 1}}}]},
         "finishReason": "STOP"},
        {"index": 1, "content": {"parts": [{"text": "Yo"}]}, "finishReason": "MAX_TOKENS"}],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 3, "totalTokenCount": 5}}
    completion = gemini.chat_completion_from_gemini(answer, completion_id="c", created=1, model="m")
    first, second = completion["choices"]
    assert first["message"] == {"role": "assistant", "content": "Hi", "refusal": None, "reasoning_content": "hmm",
                                "tool_calls": [{"id": "call_f", "type": "function",
                                                "function": {"name": "f", "arguments": '{"a":1}'}}]}
    assert first["finish_reason"] == "tool_calls"  # STOP with a call
    assert (second["index"], second["message"]["content"], second["finish_reason"]) == (1, "Yo", "length")
    assert completion["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    with pytest.raises(UpstreamError) as blocked:
        gemini.chat_completion_from_gemini({"promptFeedback": {"blockReason": "SAFETY"}}, completion_id="c",
                                             created=1, model="m")
    assert blocked.value.http_status == 400


# --------------------------------------------------------------------------- SageMaker chat


@pytest.mark.parametrize("rendered, body, stream, expected", [
    ({"inputs": "hi", "parameters": {"max_new_tokens": 512, "details": True, "temperature": 0.1}, "fake": {}},
     {"model": "x", "messages": USER}, False,
     {"messages": USER, "max_tokens": 512, "temperature": 0.1, "fake": {}}),
    ({"inputs": "hi", "parameters": {"max_new_tokens": 512}},
     {"model": "x", "messages": USER, "max_completion_tokens": 7, "temperature": 1, "stream": True,
      "stream_options": {"include_usage": True}}, True,
     {"messages": USER, "max_tokens": 7, "temperature": 1, "stream_options": {"include_usage": True}}),
    ({"inputs": "hi"}, {"messages": USER, "stream_options": {"include_usage": True}, "tools": [FUNCTION]}, False,
     {"messages": USER, "tools": [FUNCTION]}),
])
def test_sagemaker_chat_body(rendered, body, stream, expected):
    fields = sagemaker.sagemaker_chat_fields(body, stream=stream)
    assert sagemaker.sagemaker_chat_body(rendered, fields) == expected


def test_chat_completion_from_sagemaker():
    answer = {"id": "chatcmpl-0", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [CALL]}, "finish_reason": "eos_token"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    completion = sagemaker.chat_completion_from_sagemaker(answer, completion_id="c", created=1, model="m")
    assert completion["id"] == "c" and completion["model"] == "m"
    assert completion["choices"][0]["message"]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    answer["choices"][0]["message"] = {"role": "assistant", "content": "Hi"}
    assert sagemaker.chat_completion_from_sagemaker(answer, completion_id="c", created=1,
                                                   model="m")["choices"][0]["finish_reason"] == "stop"


def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra}


CHAT_STREAM = [
    chunk({"role": "assistant", "content": "He"}), chunk({"reasoning_content": "hmm"}), chunk({"content": "llo"}),
    chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
    chunk({}, "tool_calls", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
]
CHAT_ITEMS = [Delta("He"), Reasoning("hmm"), Delta("llo"),
              Delta({"type": "function", "id": "t1", "function": {"name": "f", "arguments": {"a": 1}}}),
              Done("tool_calls", {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})]


def test_tgi_chat_decoder_reads_sse_chunks_to_done():
    data = b"".join(b"data:" + json.dumps(c).encode() + b"\n\n" for c in CHAT_STREAM) + b"data: [DONE]\n\n"
    decoder = TGIChatDecoder()
    items = [item for byte in range(len(data)) for item in decoder.feed(data[byte:byte + 1])]
    assert items + decoder.finish() == CHAT_ITEMS


def test_lmi_chat_decoder_reads_json_lines_to_the_end():
    decoder = LMIChatDecoder()
    data = b"".join(json.dumps(c).encode() + b"\n" for c in CHAT_STREAM)
    assert decoder.feed(data) + decoder.finish() == CHAT_ITEMS
    cut = LMIChatDecoder()
    assert cut.feed(json.dumps(CHAT_STREAM[0]).encode() + b"\n") == [Delta("He")]
    assert isinstance(cut.finish()[0], Failure)  # no finish_reason: the answer is not complete
    broken = TGIChatDecoder()
    assert isinstance(broken.feed(b'data: {"error": {"message": "out of memory"}}\n\n')[0], Failure)


def test_a_translated_stream_of_a_call_with_stop_finishes_with_tool_calls():
    events = OpenAIChatEvents(completion_id="c", created=0, model="m", include_usage=False, relay=False)
    data = events.content({"functionCall": {"name": "f", "args": {}}}) + events.last("STOP", None)
    assert events_of(data)[-2]["choices"][0]["finish_reason"] == "tool_calls"


# --------------------------------------------------------------------------- fuzz


@given(body=bodies)
@fuzz(200)
def test_translations_only_refuse_with_invalid_field(body):
    for translate, contents, role in ((anthropic.anthropic_request, "messages", "role"),
                                      (lambda b: gemini.gemini_request(b, stream=False), "contents", "role")):
        try:
            fields = translate(body)
        except InvalidField:
            continue
        json.dumps(fields)  # what is sent is JSON
        roles = [turn[role] for turn in fields[contents]]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
