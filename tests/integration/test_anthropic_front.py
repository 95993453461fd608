"""The Anthropic Messages front through the real ``anthropic`` SDK (sync and async):
``messages.create`` and ``messages.stream`` (its helpers assembling text and tool use)
over an OpenAI-interface model (FakeOpenAI) and a Bedrock Converse model (FakeBedrock),
relayed to an Anthropic model (FakeAnthropic), errors in Anthropic's shape, keys as
``x-api-key`` or Bearer, ``count_tokens``. Each test checks what reached the provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from mlstream.testing import fake_anthropic
from mlstream.testing.fake_anthropic import FakeAnthropic
from mlstream.testing.fake_bedrock import DEFAULT_TEXT as BEDROCK_TEXT
from mlstream.testing.fake_openai import DEFAULT_TEXT, TOOL_CALL_ID, Scenario
from mlstream.testing.scripted import Scenario as ScriptedScenario
from mlstream.testing.scripted import fake_tokens

from ..support.clients import Client
from ..support.connectors import BEDROCK_TOOL, bedrock_model, openai_connector
from ..support.servers import create_key
from ..support.timeouts import HANG_GUARD

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}
USER = [{"role": "user", "content": "Who is Hamlet?"}]


def sdk(server: Any, key: str = "unused", **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=HANG_GUARD,
                               default_headers=headers or None)


def async_sdk(server: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=HANG_GUARD)


def openai_model(client: Client, fake: Any, **scenario: Any) -> str:
    return client.model_for(openai_connector(fake, model=Scenario(**scenario).to_model()))


# --------------------------------------------------------------------------- over OpenAI


def test_create_over_openai_translates_the_conversation_and_answers_a_message(server, client, fake):
    model_id = openai_model(client, fake, tool="get_weather")
    conversation = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"location": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "rainy"},
                                     {"type": "text", "text": "And in Elsinore?"}]},
    ]
    message = sdk(server).messages.create(
        model=model_id, max_tokens=100, system="You are terse.", messages=conversation, tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, stop_sequences=["END"],
        metadata={"user_id": "u-1"}, extra_body={"temperature": 0.5, "top_p": 0.8, "top_k": 5})
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == DEFAULT_TEXT
    tool = message.content[1]
    assert (tool.id, tool.name, tool.input) == (TOOL_CALL_ID, "get_weather", {"location": "Elsinore",
                                                                              "unit": "celsius"})
    assert message.stop_reason == "tool_use" and message.model == model_id and message.id.startswith("msg_")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    sent = fake.stats.requests[-1].body
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": '{"location": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "rainy"},
        {"role": "user", "content": "And in Elsinore?"},
    ]
    assert (sent["max_completion_tokens"], sent["temperature"], sent["top_p"], sent["stop"], sent["user"]) == (
        100, 0.5, 0.8, ["END"], "u-1")
    assert sent["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters":
                                                               WEATHER["input_schema"],
                                                               "description": "The weather in a city"}}]
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert "top_k" not in sent and "stream" not in sent and sent["model"].startswith("gpt-fake")


def test_stream_over_openai_assembles_text_tool_use_and_usage(server, client, fake):
    model_id = openai_model(client, fake, tool="get_weather")
    with sdk(server).messages.stream(model=model_id, max_tokens=100, messages=USER, tools=[WEATHER]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == DEFAULT_TEXT == final.content[0].text
    assert final.content[1].type == "tool_use" and final.content[1].input == {"location": "Elsinore",
                                                                              "unit": "celsius"}
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    sent = fake.stats.requests[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_async_create_and_stream_over_openai(server, client, fake):
    model_id = openai_model(client, fake)

    async def run() -> tuple[str, str]:
        async with async_sdk(server) as sdk_:
            message = await sdk_.messages.create(model=model_id, max_tokens=50, messages=USER)
            async with sdk_.messages.stream(model=model_id, max_tokens=50, messages=USER) as stream:
                text = "".join([piece async for piece in stream.text_stream])
            return message.content[0].text, text

    assert asyncio.run(run()) == (DEFAULT_TEXT, DEFAULT_TEXT)


# --------------------------------------------------------------------------- over Bedrock


def test_create_and_stream_over_bedrock_with_tool_use(server, client, bedrock):
    bedrock_model(client, bedrock, tool_use=BEDROCK_TOOL)
    message = sdk(server).messages.create(model="claude", max_tokens=64, messages=USER, tools=[WEATHER],
                                          system=[{"type": "text", "text": "Be brief."}])
    assert message.content[0].text == BEDROCK_TEXT
    assert (message.content[1].id, message.content[1].input) == ("tooluse_front0001", {"location": "Elsinore"})
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0
    sent = bedrock.stats.requests[-1].body
    assert sent["system"] == [{"text": "Be brief."}] and sent["inferenceConfig"]["maxTokens"] == 64
    assert sent["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    with sdk(server).messages.stream(model="claude", max_tokens=64, messages=USER, tools=[WEATHER]) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == BEDROCK_TEXT and final.content[1].name == "get_weather"
    assert final.stop_reason == "tool_use" and final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert events[0] == "message_start" and events[-1] == "message_stop" and "input_json" in events


def test_async_create_and_stream_over_bedrock(server, client, bedrock):
    bedrock_model(client, bedrock)

    async def run() -> tuple[str, str]:
        async with async_sdk(server) as sdk_:
            message = await sdk_.messages.create(model="claude", max_tokens=64, messages=USER)
            async with sdk_.messages.stream(model="claude", max_tokens=64, messages=USER) as stream:
                return message.content[0].text, (await stream.get_final_message()).content[0].text

    assert asyncio.run(run()) == (BEDROCK_TEXT, BEDROCK_TEXT)


# --------------------------------------------------------------------------- relayed


@pytest.fixture
def anthropic_fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def test_an_anthropic_model_gets_the_body_as_it_is_thinking_included(server, client, anthropic_fake):
    connector = fake_anthropic.connector(anthropic_fake.url, anthropic_fake.api_key)
    connector["parameters"]["fake"] = {"reasoning": "Let me think", "chunks": 4}
    client.register(client.create_connector(connector), name="claude-direct")
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "sig"},
                                                 {"type": "text", "text": "Hello"}]},
               {"role": "user", "content": [{"type": "text", "text": "Who is Hamlet?",
                                             "cache_control": {"type": "ephemeral"}}]}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    message = sdk(server).messages.create(model="claude-direct", max_tokens=2000, messages=history,
                                          thinking=thinking)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].signature == fake_anthropic.SIGNATURE
    sent = anthropic_fake.stats.requests[-1]
    assert sent.body["messages"] == history and sent.body["thinking"] == thinking
    assert sent.body["model"] == "claude-sonnet-4-5"  # the connector's
    assert sent.headers["x-api-key"] == anthropic_fake.api_key  # the connector's key, not the client's
    with sdk(server).messages.stream(model="claude-direct", max_tokens=2000, messages=history,
                                     thinking=thinking) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].thinking == "Let me think" and final.content[0].signature == fake_anthropic.SIGNATURE
    assert final.content[1].text == "".join(fake_tokens(ScriptedScenario(chunks=4)))
    assert "thinking" in kinds and "signature" in kinds and kinds[-1] == "message_stop"
    assert anthropic_fake.stats.requests[-1].body["stream"] is True


# --------------------------------------------------------------------------- errors, keys, tokens


def test_errors_are_anthropics_shape_and_the_sdks_classes(server, client, fake):
    model_id = openai_model(client, fake)
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk(server).messages.create(model="no-such-model", max_tokens=10, messages=USER)
    assert missing.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                            "message": missing.value.body["error"]["message"]}}
    raw = client.call("POST", "/v1/messages", {"model": model_id, "messages": USER})
    assert raw.status == 400 and raw.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in raw.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="document"):
        sdk(server).messages.create(model=model_id, max_tokens=10, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])
    unmatched = client.call("GET", "/v1/messages/nothing")
    assert unmatched.status == 404 and unmatched.body["type"] == "error"
    limited = openai_model(client, fake, status=429)
    with pytest.raises(anthropic.RateLimitError):
        sdk(server).messages.create(model=limited, max_tokens=10, messages=USER)


def test_a_failure_mid_stream_is_an_error_event_and_no_message_stop(server, client, fake):
    model_id = openai_model(client, fake, chunks=6, error_after=2)
    received: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as failed:
        with sdk(server).messages.stream(model=model_id, max_tokens=10, messages=USER) as stream:
            for event in stream:
                received.append(event.type)
    assert "message_start" in received and "message_stop" not in received
    assert failed.value.body["error"]["type"] in ("api_error", "invalid_request_error")
    raw = client.call("POST", "/v1/messages", {"model": model_id, "max_tokens": 10, "messages": USER,
                                               "stream": True})
    assert raw.status == 200 and "event: error" in raw.body and "message_stop" not in raw.body


def test_x_api_key_or_bearer_carry_an_mlstream_key(make_server, tmp_path, fake):
    server = make_server()
    model_id = Client(server.url).model_for(openai_connector(fake))
    key = create_key(tmp_path / "data", "user", "claude")
    assert sdk(server, key, **{"anthropic-version": "2023-06-01"}).messages.create(
        model=model_id, max_tokens=10, messages=USER).content[0].text == DEFAULT_TEXT
    bearer = anthropic.Anthropic(base_url=server.url, auth_token=key, max_retries=0, timeout=HANG_GUARD)
    assert bearer.messages.create(model=model_id, max_tokens=10, messages=USER).content
    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk(server, "not-a-key").messages.create(model=model_id, max_tokens=10, messages=USER)
    assert refused.value.body["error"]["type"] == "authentication_error"


def test_count_tokens_answers_an_estimate(server, client, fake):
    model_id = openai_model(client, fake)
    counted = sdk(server).messages.count_tokens(model=model_id, messages=USER, system="Be brief.",
                                                tools=[WEATHER])
    text = json.dumps(USER, separators=(",", ":")) + "Be brief." + json.dumps([WEATHER], separators=(",", ":"))
    assert counted.input_tokens == -(-len(text) // 4)
    assert not fake.stats.requests  # no provider asked
    with pytest.raises(anthropic.NotFoundError):
        sdk(server).messages.count_tokens(model="no-such-model", messages=USER)
