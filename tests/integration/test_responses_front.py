"""The Responses front through the real ``openai`` SDK: ``responses.create`` and
``responses.stream`` (sync and async) over an OpenAI-interface model and a Bedrock model,
tool calls and their outputs, a ``previous_response_id`` chain, stored responses (GET,
DELETE, ``store: false``, expiry), errors and a failure mid-stream. Each test checks what
reached the provider, not only what came back."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pytest

from mlstream.testing.fake_bedrock import DEFAULT_TEXT as BEDROCK_TEXT
from mlstream.testing.fake_openai import (
    DEFAULT_TEXT,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    Scenario,
)

from ..support.clients import Client
from ..support.connectors import BEDROCK_TOOL, bedrock_model, openai_connector
from ..support.timeouts import HANG_GUARD

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}


def sdk(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=HANG_GUARD)


def openai_model(client: Client, fake: Any, **scenario: Any) -> str:
    return client.model_for(openai_connector(fake, model=Scenario(**scenario).to_model()))


def test_create_translates_input_instructions_and_settings(server, client, fake):
    model_id = openai_model(client, fake)
    response = sdk(server).responses.create(
        model=model_id, instructions="Be terse.", max_output_tokens=50, temperature=0.2, top_p=0.9,
        input=[{"role": "developer", "content": "Answer in English."},
               {"role": "user", "content": [{"type": "input_text", "text": "Who is "},
                                            {"type": "input_text", "text": "Hamlet?"}]}],
        metadata={"app": "test"}, truncation="disabled", include=[])
    assert response.output_text == DEFAULT_TEXT and response.status == "completed"
    assert response.id.startswith("resp_") and response.model == model_id and response.metadata == {"app": "test"}
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0 and usage.output_tokens_details.reasoning_tokens == 0
    sent = fake.stats.requests[-1].body
    assert sent["messages"] == [{"role": "system", "content": "Be terse."},
                                {"role": "developer", "content": "Answer in English."},
                                {"role": "user", "content": "Who is Hamlet?"}]
    assert (sent["max_completion_tokens"], sent["temperature"], sent["top_p"]) == (50, 0.2, 0.9)
    assert "metadata" not in sent and "stream" not in sent


def test_tool_calls_and_a_previous_response_id_chain(server, client, fake):
    model_id = openai_model(client, fake, tool="get_weather")
    first = sdk(server).responses.create(model=model_id, input="Weather in Elsinore?", tools=[WEATHER],
                                         tool_choice="required", instructions="Use tools.")
    call = next(item for item in first.output if item.type == "function_call")
    assert (call.call_id, call.name, json.loads(call.arguments)) == (TOOL_CALL_ID, "get_weather",
                                                                     json.loads(TOOL_ARGUMENTS))
    sent = fake.stats.requests[-1].body
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["parameters"], "description": "The weather in a city"}}]
    assert sent["tool_choice"] == "required"
    second = sdk(server).responses.create(
        model=model_id, previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rainy"}])
    assert second.previous_response_id == first.id
    sent = fake.stats.requests[-1].body["messages"]
    assert sent[0] == {"role": "user", "content": "Weather in Elsinore?"}  # instructions are not carried over
    assert sent[1]["role"] == "assistant" and sent[1]["tool_calls"][0]["id"] == TOOL_CALL_ID
    assert sent[2] == {"role": "tool", "tool_call_id": TOOL_CALL_ID, "content": "rainy"}
    third = sdk(server).responses.create(model=model_id, previous_response_id=second.id, input="Thanks!")
    sent = fake.stats.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[-1] == {"role": "user", "content": "Thanks!"}
    assert sdk(server).responses.retrieve(third.id).output_text == third.output_text
    sdk(server).responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        sdk(server).responses.retrieve(third.id)
    with pytest.raises(openai.NotFoundError):
        sdk(server).responses.delete(third.id)
    with pytest.raises(openai.BadRequestError) as gone:
        sdk(server).responses.create(model=model_id, previous_response_id=third.id, input="Again")
    assert gone.value.body["param"] == "previous_response_id"


def test_stream_events_with_sequence_numbers_text_and_tool_call(server, client, fake):
    model_id = openai_model(client, fake, tool="get_weather")
    with sdk(server).responses.stream(model=model_id, input="Weather?", tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [event.sequence_number for event in events] == list(range(len(events)))
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-1] == "response.completed"
    for kind in ("response.output_text.delta", "response.output_text.done", "response.content_part.done",
                 "response.function_call_arguments.delta", "response.function_call_arguments.done",
                 "response.output_item.done"):
        assert kind in kinds
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == DEFAULT_TEXT == final.output_text
    call = final.output[1]
    assert call.type == "function_call" and json.loads(call.arguments) == json.loads(TOOL_ARGUMENTS)
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert fake.stats.requests[-1].body["stream_options"] == {"include_usage": True}
    stored = sdk(server).responses.retrieve(final.id)
    assert stored.output_text == DEFAULT_TEXT and stored.output[1].call_id == call.call_id


def test_store_false_keeps_nothing(server, client, fake):
    model_id = openai_model(client, fake)
    response = sdk(server).responses.create(model=model_id, input="Hi", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        sdk(server).responses.retrieve(response.id)


def test_stored_responses_expire(make_server, fake):
    server = make_server(responses_ttl_days=1.5 / 86400)
    model_id = openai_model(Client(server.url), fake)
    response = sdk(server).responses.create(model=model_id, input="Hi")
    assert sdk(server).responses.retrieve(response.id).id == response.id
    time.sleep(1.6)
    with pytest.raises(openai.NotFoundError):
        sdk(server).responses.retrieve(response.id)


def test_create_and_stream_over_bedrock(server, client, bedrock):
    bedrock_model(client, bedrock, tool_use=BEDROCK_TOOL)
    response = sdk(server).responses.create(model="claude", input="Weather?", tools=[WEATHER],
                                            instructions="Be brief.")
    assert response.output_text == BEDROCK_TEXT
    assert response.output[1].call_id == "tooluse_front0001" and response.usage.output_tokens > 0
    sent = bedrock.stats.requests[-1].body
    assert sent["system"] == [{"text": "Be brief."}] and sent["toolConfig"]["tools"][0]["toolSpec"]["name"] == \
        "get_weather"
    with sdk(server).responses.stream(model="claude", input="Weather?", tools=[WEATHER]) as stream:
        final = stream.get_final_response()
    assert final.output_text == BEDROCK_TEXT and final.output[1].name == "get_weather"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    chained = sdk(server).responses.create(
        model="claude", previous_response_id=final.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": final.output[1].call_id, "output": "rainy"}])
    assert chained.output_text == BEDROCK_TEXT
    turns = bedrock.stats.requests[-1].body["messages"]
    assert turns[1]["content"][-1]["toolUse"]["toolUseId"] == "tooluse_front0001"
    assert turns[2]["content"][0]["toolResult"]["toolUseId"] == "tooluse_front0001"


def test_async_create_and_stream(server, client, fake):
    model_id = openai_model(client, fake)

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                                      timeout=HANG_GUARD) as sdk_:
            response = await sdk_.responses.create(model=model_id, input="Hi")
            async with sdk_.responses.stream(model=model_id, input="Hi") as stream:
                final = await stream.get_final_response()
            return response.output_text, final.output_text

    assert asyncio.run(run()) == (DEFAULT_TEXT, DEFAULT_TEXT)


def test_a_failure_mid_stream_is_response_failed_never_completed(server, client, fake):
    model_id = openai_model(client, fake, chunks=6, error_after=2)
    with sdk(server).responses.create(model=model_id, input="Hi", stream=True) as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    assert "response.output_text.delta" in kinds
    raw = client.call("POST", "/v1/responses", {"model": model_id, "input": "Hi", "stream": True})
    assert raw.status == 200 and '"status":"failed"' in raw.body and "response.completed" not in raw.body


def test_errors_are_openais_shape(server, client, fake):
    model_id = openai_model(client, fake)
    with pytest.raises(openai.NotFoundError) as missing:
        sdk(server).responses.create(model="no-such-model", input="Hi")
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as tool:
        sdk(server).responses.create(model=model_id, input="Hi", tools=[{"type": "web_search"}])
    assert tool.value.body["param"] == "tools[0]"
    with pytest.raises(openai.BadRequestError) as unknown:
        sdk(server).responses.create(model=model_id, input="Hi", extra_body={"frobnicate": 1})
    assert unknown.value.body["param"] == "frobnicate"
    assert not fake.stats.requests  # nothing refused reached the provider
