"""The Responses front's wire shapes and stream events, pure: items as chat messages
(table), a request as a chat request, the answer as output items and usage, and the
event sequence with its sequence numbers, ending completed, incomplete or failed."""

from __future__ import annotations

import json

import pytest

from mlstream.errors import InvalidField, UpstreamError
from mlstream.fronts.chat import ChatAnswer
from mlstream.fronts.responses import wire
from mlstream.fronts.responses.events import ResponseEvents

CALL = {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"Oslo"}'}
CHAT_CALL = {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"c":"Oslo"}'}}

ITEMS = [
    ("user-text-parts", [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]}],
     [{"role": "user", "content": "ab"}]),
    ("image", [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What?"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]}],
     [{"role": "user", "content": [{"type": "text", "text": "What?"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]),
    ("assistant-text-then-calls", [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
        CALL, {**CALL, "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "rainy"},
        {"type": "reasoning", "summary": []}],
     [{"role": "assistant", "content": "Let me see.", "tool_calls": [
         CHAT_CALL, {**CHAT_CALL, "id": "c2"}]},
      {"role": "tool", "tool_call_id": "c1", "content": "rainy"}]),
    ("a-call-alone", [CALL], [{"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]}]),
    ("developer", [{"role": "developer", "content": "Be brief."}], [{"role": "developer", "content": "Be brief."}]),
]


@pytest.mark.parametrize("items, messages", [case[1:] for case in ITEMS], ids=[case[0] for case in ITEMS])
def test_items_to_messages(items, messages):
    assert wire.items_to_messages(items, "input") == messages


@pytest.mark.parametrize("items, param", [
    ([{"type": "item_reference", "id": "x"}], "input[0].type"),
    ([{"role": "tool", "content": "x"}], "input[0].role"),
    ([{"type": "function_call", "name": "w"}], "input[0]"),
    ([{"role": "assistant", "content": [{"type": "input_image", "image_url": "x"}]}], "input[0].content[0]"),
], ids=["item-reference", "bad-role", "call-without-id", "assistant-image"])
def test_item_refusals_name_the_field(items, param):
    with pytest.raises(InvalidField) as refused:
        wire.items_to_messages(items, "input")
    assert refused.value.param == param


def test_chat_request_puts_the_instructions_first_and_maps_the_settings():
    body = {"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 20, "temperature": 0.1, "top_p": 0.9,
            "parallel_tool_calls": False, "tool_choice": {"type": "function", "name": "w"},
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": True}],
            "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}}}
    earlier = [{"role": "user", "content": "Before"}, {"role": "assistant", "content": "Yes"}]
    assert wire.chat_request(body, earlier + wire.input_messages(body)) == {
        "messages": [{"role": "system", "content": "Be brief."}, *earlier, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 20, "temperature": 0.1, "top_p": 0.9, "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "w"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}}


@pytest.mark.parametrize("body, param", [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": "x", "conversation": "c"}, "conversation"),
    ({"model": "m", "input": "x", "background": True}, "background"),
], ids=["no-input", "unknown", "background"])
def test_request_refusals(body, param):
    with pytest.raises(InvalidField) as refused:
        wire.check_request(body)
    assert refused.value.param == param


def test_output_items_and_usage():
    answer = ChatAnswer("Hello", "Hmm", (("c1", "w", "{}"),), "tool_calls",
                        {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                         "prompt_tokens_details": {"cached_tokens": 2},
                         "completion_tokens_details": {"reasoning_tokens": 3}})
    ids = iter(["rs_1", "msg_1", "fc_1"])
    assert wire.output_items(answer, lambda prefix: next(ids)) == [
        {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Hmm"}]},
        {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]},
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c1", "name": "w",
         "arguments": "{}"}]
    assert wire.usage(answer.usage) == {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 2},
                                        "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3},
                                        "total_tokens": 12}


def parse(data: bytes) -> list[dict]:
    events = []
    for block in data.decode().split("\n\n"):
        if block:
            name, payload = block.split("\n", 1)
            event = json.loads(payload.removeprefix("data: "))
            assert name == "event: " + event["type"]
            events.append(event)
    return events


def test_stream_events_in_order_with_sequence_numbers_and_kept():
    kept: list[dict] = []
    events = ResponseEvents({"input": "Hi", "store": True}, response_id="resp_1", created_at=7, model="m",
                            keep=kept.append)
    data = (events.reasoning("Hmm") + events.content("To be") + events.content(", or not")
            + events.content({"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "Oslo"}})
            + events.last("tool_use", {"input_tokens": 5, "output_tokens": 7}))
    got = parse(data)
    assert [event["sequence_number"] for event in got] == list(range(len(got)))
    assert [event["type"] for event in got] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [event.get("output_index") for event in got[2:-1]] == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    final = got[-1]["response"]
    assert final["id"] == "resp_1" and final["status"] == "completed" and final["created_at"] == 7
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "To be, or not"
    assert final["output"][2]["arguments"] == '{"c":"Oslo"}' and final["output"][2]["call_id"] == "t1"
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}
    assert kept == [final]


def test_a_length_finish_is_incomplete():
    events = ResponseEvents({"input": "Hi"}, response_id="resp_1", created_at=7, model="m")
    got = parse(events.content("To") + events.last("max_tokens", None))
    assert got[-1]["type"] == "response.incomplete"
    assert got[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_failure_is_response_failed_never_completed():
    kept: list[dict] = []
    events = ResponseEvents({"input": "Hi"}, response_id="resp_1", created_at=7, model="m", keep=kept.append)
    got = parse(events.content("To") + events.error(UpstreamError("the provider failed mid-stream")))
    assert got[-1]["type"] == "response.failed" and "response.completed" not in [e["type"] for e in got]
    assert got[-1]["response"]["status"] == "failed"
    assert got[-1]["response"]["error"] == {"code": "server_error", "message": "the provider failed mid-stream"}
    assert kept[0]["status"] == "failed"
    first = ResponseEvents({"input": "Hi"}, response_id="resp_2", created_at=7, model="m")
    assert [e["type"] for e in parse(first.error(UpstreamError("x")))] == [
        "response.created", "response.in_progress", "response.failed"]
