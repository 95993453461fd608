"""The OpenAI front over the providers issue's models, through the real ``openai`` SDK
(sync and async): Anthropic Messages, Gemini generateContent, SageMaker TGI and LMI
endpoints on their fakes. Each test checks what reached the provider (the fakes record
every request), not only what came back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from mlstream.testing import fake_anthropic, fake_gemini, fake_sagemaker
from mlstream.testing.fake_anthropic import FakeAnthropic
from mlstream.testing.fake_gemini import FakeGemini
from mlstream.testing.fake_sagemaker import FakeSageMaker
from mlstream.testing.scripted import DEFAULT_TEXT, Scenario, fake_tokens

from ..support.aws import isolate_aws_environment
from ..support.clients import Client
from ..support.openai_sdk import USER, WEATHER_TOOL, async_sdk, sdk

TOOL = {"id": "toolu_front0001", "name": "get_weather", "input": {"location": "Elsinore"}}
IMAGE = "data:image/png;base64,iVBORw0KGgo="
# A conversation with every kind of message: system, user text and image, an assistant's
# tool call, its result, and the next user turn (merged with the result into one turn).
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                 {"type": "image_url", "image_url": {"url": IMAGE}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rainy"},
    {"role": "user", "content": "And in Elsinore?"},
]


def text_of(chunks: int) -> str:
    """The answer a fake streams in ``chunks`` tokens."""
    return "".join(fake_tokens(Scenario(chunks=chunks)))


def model(client: Client, connector: dict[str, Any], name: str, **knobs: Any) -> str:
    connector["parameters"]["fake"] = knobs
    return client.register(client.create_connector(connector), name=name)


def stream_all(model_name: str, server: Any, **kwargs: Any) -> tuple[str, Any]:
    """The SDK's stream helper: the text of its content events, and its final completion."""
    with sdk(server).chat.completions.stream(model=model_name, messages=USER, **kwargs) as stream:
        text = "".join(event.delta for event in stream if event.type == "content.delta")
        return text, stream.get_final_completion()


def assert_tool_call(completion: Any, call_id: str) -> None:
    call = completion.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        call_id, "get_weather", {"location": "Elsinore"})
    assert completion.choices[0].finish_reason == "tool_calls"


# --------------------------------------------------------------------------- Anthropic


@pytest.fixture
def anthropic_fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def anthropic_model(client: Client, fake: FakeAnthropic, name: str = "claude-direct", **knobs: Any) -> str:
    return model(client, fake_anthropic.connector(fake.url, fake.api_key), name, **knobs)


def test_anthropic_chat_translates_the_request_and_the_answer(server, client, anthropic_fake):
    anthropic_model(client, anthropic_fake, tool_use=TOOL)
    answer = sdk(server).chat.completions.create(
        model="claude-direct", messages=CONVERSATION, max_tokens=100, temperature=0.5, top_p=0.8, stop="END",
        tools=[WEATHER_TOOL], tool_choice="required", parallel_tool_calls=False, user="u-1", seed=3)
    message = answer.choices[0].message
    assert message.content == DEFAULT_TEXT and answer.model == "claude-direct"
    assert_tool_call(answer, "toolu_front0001")
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens > 0
    sent = anthropic_fake.stats.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == anthropic_fake.api_key
    body = sent.body
    assert body["model"] == "claude-sonnet-4-5" and "stream" not in body  # the connector's model
    assert body["system"] == [{"type": "text", "text": "You are terse."}]
    assert body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "rainy"}]},
            {"type": "text", "text": "And in Elsinore?"}]},
    ]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop_sequences"]) == (100, 0.5, 0.8, ["END"])
    assert body["tools"] == [{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"],
                              "description": "The weather in a city"}]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["metadata"] == {"user_id": "u-1"} and "seed" not in body
    assert body["fake"] == {"tool_use": TOOL}  # the template's own field, kept


def test_anthropic_max_tokens_is_the_clients_else_the_connectors_else_the_default(server, client, anthropic_fake):
    anthropic_model(client, anthropic_fake)
    sdk(server).chat.completions.create(model="claude-direct", messages=USER)
    assert anthropic_fake.stats.requests[-1].body["max_tokens"] == 1024  # the connector's rendered value
    sdk(server).chat.completions.create(model="claude-direct", messages=USER, max_completion_tokens=7)
    assert anthropic_fake.stats.requests[-1].body["max_tokens"] == 7
    connector = fake_anthropic.connector(anthropic_fake.url, anthropic_fake.api_key)
    connector["actions"][0]["request_body"] = '{ "model": "${parameters.model}", "messages": [] }'
    model(client, connector, "claude-no-max")
    sdk(server).chat.completions.create(model="claude-no-max", messages=USER)
    assert anthropic_fake.stats.requests[-1].body["max_tokens"] == 4096


def test_anthropic_stream_text_tool_call_usage_and_reasoning_apart(server, client, anthropic_fake):
    anthropic_model(client, anthropic_fake, tool_use=TOOL, chunks=4, reasoning="Let me think")
    text, final = stream_all("claude-direct", server, tools=[WEATHER_TOOL], stream_options={"include_usage": True})
    assert text == text_of(4) == final.choices[0].message.content  # the thinking is not content
    assert_tool_call(final, "toolu_front0001")
    assert final.usage.completion_tokens > 0 and final.usage.prompt_tokens > 0
    sent = anthropic_fake.stats.requests[-1].body
    assert sent["stream"] is True and sent["tools"][0]["name"] == "get_weather"
    chunks = list(sdk(server).chat.completions.create(model="claude-direct", messages=USER, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    thoughts = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    assert "".join(t for t in thoughts if t) == "Let me think"


def test_anthropic_async_stream(server, client, anthropic_fake):
    anthropic_model(client, anthropic_fake, chunks=3)

    async def run() -> str:
        api = async_sdk(server)
        stream = await api.chat.completions.create(model="claude-direct", messages=USER, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        answer = await api.chat.completions.create(model="claude-direct", messages=USER)
        await api.close()
        return text + "|" + answer.choices[0].message.content

    assert asyncio.run(run()) == text_of(3) + "|" + text_of(3)


def test_anthropic_errors_are_the_sdks_exception_classes(server, client, anthropic_fake):
    api = sdk(server)
    anthropic_model(client, anthropic_fake, "overloaded", status=529)
    with pytest.raises(openai.InternalServerError) as overloaded:
        api.chat.completions.create(model="overloaded", messages=USER)
    assert overloaded.value.status_code == 503 and overloaded.value.body["type"] == "server_error"
    anthropic_model(client, anthropic_fake, "limited", status=429)
    with pytest.raises(openai.RateLimitError):
        api.chat.completions.create(model="limited", messages=USER, stream=True)
    connector = fake_anthropic.connector(anthropic_fake.url, "sk-ant-wrong")
    model(client, connector, "wrong-key")
    with pytest.raises(openai.AuthenticationError):
        api.chat.completions.create(model="wrong-key", messages=USER)
    anthropic_model(client, anthropic_fake, "breaks", chunks=6, error_after=2)
    with pytest.raises(openai.APIError, match="overloaded_error"):
        for _ in api.chat.completions.create(model="breaks", messages=USER, stream=True):
            pass
    sent = len(anthropic_fake.stats.requests)
    for kwargs, param in (({"n": 2}, "n"), ({"logprobs": True}, "logprobs"),
                          ({"response_format": {"type": "json_object"}}, "response_format"),
                          ({"audio": {"voice": "alloy"}}, "audio")):
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(**{"model": "limited", "messages": USER, **kwargs})
        assert refused.value.body["param"] == param
    assert len(anthropic_fake.stats.requests) == sent  # refused before anything was sent


# --------------------------------------------------------------------------- Gemini


@pytest.fixture
def gemini_fake() -> Iterator[FakeGemini]:
    with FakeGemini() as fake:
        yield fake


def gemini_model(client: Client, fake: FakeGemini, name: str = "gemini", **knobs: Any) -> str:
    return model(client, fake_gemini.connector(fake.url, fake.api_key), name, **knobs)


def test_gemini_chat_translates_the_request_and_the_answer(server, client, gemini_fake):
    gemini_model(client, gemini_fake, tool_use=TOOL)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    answer = sdk(server).chat.completions.create(
        model="gemini", messages=CONVERSATION, max_tokens=100, temperature=0.5, top_p=0.8, stop=["END"], seed=3,
        n=1, tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    assert answer.choices[0].message.content == DEFAULT_TEXT
    assert_tool_call(answer, "toolu_front0001")  # Gemini said STOP; a call was made: tool_calls
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens > 0
    sent = gemini_fake.stats.requests[-1]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == gemini_fake.api_key
    body = sent.body
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "What is this?"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"location": "Oslo"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"content": "rainy"}}},
                                   {"text": "And in Elsinore?"}]},
    ]
    assert body["generationConfig"] == {
        "maxOutputTokens": 100, "temperature": 0.5, "topP": 0.8, "stopSequences": ["END"], "candidateCount": 1,
        "seed": 3, "responseMimeType": "application/json", "responseJsonSchema": schema}
    assert body["tools"] == [{"functionDeclarations": [{
        "name": "get_weather", "description": "The weather in a city",
        "parametersJsonSchema": WEATHER_TOOL["function"]["parameters"]}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    assert body["fake"] == {"tool_use": TOOL}


def test_gemini_ml_commons_blueprint_renders_with_the_translated_contents(server, client, gemini_fake):
    """ml-commons' Gemini chat blueprint: {"contents": ${parameters.contents}}."""
    connector = fake_gemini.connector(gemini_fake.url, gemini_fake.api_key)
    connector["actions"][0]["request_body"] = '{ "contents": ${parameters.contents} }'
    model(client, connector, "gemini-blueprint")
    answer = sdk(server).chat.completions.create(model="gemini-blueprint", messages=CONVERSATION[:2] + [
        {"role": "assistant", "content": "A cat."}, {"role": "user", "content": "Sure?"}])
    assert answer.choices[0].message.content == DEFAULT_TEXT
    assert [c["role"] for c in gemini_fake.stats.requests[-1].body["contents"]] == ["user", "model", "user"]


def test_gemini_stream_text_tool_call_usage_and_reasoning_apart(server, client, gemini_fake):
    gemini_model(client, gemini_fake, tool_use=TOOL, chunks=4, reasoning="Let me think")
    text, final = stream_all("gemini", server, tools=[WEATHER_TOOL], stream_options={"include_usage": True})
    assert text == text_of(4) == final.choices[0].message.content
    assert_tool_call(final, "toolu_front0001")
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens > 0
    sent = gemini_fake.stats.requests[-1]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert sent.body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def test_gemini_async_stream(server, client, gemini_fake):
    gemini_model(client, gemini_fake, chunks=3)

    async def run() -> str:
        api = async_sdk(server)
        stream = await api.chat.completions.create(model="gemini", messages=USER, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        await api.close()
        return text

    assert asyncio.run(run()) == text_of(3)


def test_gemini_errors_are_the_sdks_exception_classes(server, client, gemini_fake):
    api = sdk(server)
    gemini_model(client, gemini_fake, "quota", status=429)
    with pytest.raises(openai.RateLimitError):
        api.chat.completions.create(model="quota", messages=USER)
    gemini_model(client, gemini_fake, "blocked", blocked="prompt")
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match="the prompt was blocked"):
            list(api.chat.completions.create(model="blocked", messages=USER, stream=stream))
    gemini_model(client, gemini_fake, "breaks", chunks=6, error_after=2)
    with pytest.raises(openai.APIError, match="UNAVAILABLE"):
        for _ in api.chat.completions.create(model="breaks", messages=USER, stream=True):
            pass
    sent = len(gemini_fake.stats.requests)
    url_image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
    for kwargs, param in (({"messages": url_image}, "messages[0].content"), ({"logprobs": True}, "logprobs"),
                          ({"n": 2, "stream": True}, "n"), ({"response_format": {"type": "xml"}}, "response_format")):
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(**{"model": "quota", "messages": USER, **kwargs})
        assert refused.value.body["param"] == param
    assert len(gemini_fake.stats.requests) == sent


# --------------------------------------------------------------------------- SageMaker TGI and LMI


@pytest.fixture(params=["tgi", "lmi"])
def sagemaker_fake(request, monkeypatch, tmp_path) -> Iterator[FakeSageMaker]:
    isolate_aws_environment(monkeypatch, tmp_path)
    with FakeSageMaker(container=request.param) as fake:
        yield fake


def sagemaker_model(client: Client, fake: FakeSageMaker, name: str = "endpoint", **knobs: Any) -> str:
    connector = fake_sagemaker.connector(fake.url, fake.access_key, fake.secret_key, fake.region)
    connector["parameters"]["_llm_interface"] = f"sagemaker/{fake.container}"
    return model(client, connector, name, **knobs)


def test_sagemaker_chat_sends_the_containers_chat_schema(server, client, sagemaker_fake):
    sagemaker_model(client, sagemaker_fake, tool_use=TOOL)
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                             {"type": "image_url", "image_url": {"url": IMAGE}}]}]
    answer = sdk(server).chat.completions.create(model="endpoint", messages=messages, temperature=0.2,
                                                 tools=[WEATHER_TOOL])
    assert answer.choices[0].message.content == DEFAULT_TEXT and answer.model == "endpoint"
    assert_tool_call(answer, "toolu_front0001")
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (6, 6 + answer.usage.completion_tokens)
    sent = sagemaker_fake.stats.requests[-1]
    assert sent.path == "/endpoints/hamlet-llm/invocations"
    assert sent.body == {"messages": messages, "max_tokens": 512, "temperature": 0.2, "tools": [WEATHER_TOOL],
                         "fake": {"tool_use": TOOL}}  # no inputs, no parameters; the template's max_new_tokens
    sdk(server).chat.completions.create(model="endpoint", messages=USER, max_completion_tokens=9)
    assert sagemaker_fake.stats.requests[-1].body["max_tokens"] == 9


def test_sagemaker_stream_text_tool_call_and_usage(server, client, sagemaker_fake):
    sagemaker_model(client, sagemaker_fake, tool_use=TOOL, chunks=4)
    text, final = stream_all("endpoint", server, tools=[WEATHER_TOOL], stream_options={"include_usage": True})
    assert text == text_of(4) == final.choices[0].message.content
    assert_tool_call(final, "toolu_front0001")
    assert final.usage.completion_tokens == 5 and final.usage.prompt_tokens == 3
    sent = sagemaker_fake.stats.requests[-1]
    assert sent.path == "/endpoints/hamlet-llm/invocations-response-stream"
    assert sent.body["stream"] is True and sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["messages"] == USER and "inputs" not in sent.body


def test_sagemaker_plain_answer_finishes_with_stop_and_streams_async(server, client, sagemaker_fake):
    sagemaker_model(client, sagemaker_fake, chunks=3)
    answer = sdk(server).chat.completions.create(model="endpoint", messages=USER)
    assert answer.choices[0].finish_reason == "stop"  # LMI's eos_token too

    async def run() -> tuple[str, str | None]:
        api = async_sdk(server)
        stream = await api.chat.completions.create(model="endpoint", messages=USER, stream=True)
        chunks = [chunk async for chunk in stream]
        await api.close()
        return ("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                chunks[-1].choices[0].finish_reason)

    assert asyncio.run(run()) == (text_of(3), "stop")


def test_sagemaker_errors_are_the_sdks_exception_classes(server, client, sagemaker_fake):
    api = sdk(server)
    sagemaker_model(client, sagemaker_fake, "throttled", status=429)
    with pytest.raises(openai.RateLimitError):
        api.chat.completions.create(model="throttled", messages=USER, stream=True)
    sagemaker_model(client, sagemaker_fake, "failing", status=500)
    with pytest.raises(openai.InternalServerError) as failed:
        api.chat.completions.create(model="failing", messages=USER)
    assert failed.value.status_code == 502
    sagemaker_model(client, sagemaker_fake, "breaks", chunks=6, error_after=2)
    with pytest.raises(openai.APIError, match="ModelStreamError"):
        for _ in api.chat.completions.create(model="breaks", messages=USER, stream=True):
            pass
