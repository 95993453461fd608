"""The OpenAI front through the real ``openai`` SDK (sync and async): chat completions,
streamed and not, tool calls, usage, embeddings, models, errors, hang-up, rate limits;
against an OpenAI-interface model (FakeOpenAI) and a Bedrock Converse model (FakeBedrock)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest

from mlstream.testing.embeddings import fake_vector
from mlstream.testing.fake_bedrock import DEFAULT_TEXT as BEDROCK_TEXT
from mlstream.testing.fake_openai import (
    DEFAULT_TEXT,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    Scenario,
)

from ..support.clients import Client, bearer, client_with
from ..support.connectors import (
    BEDROCK_TOOL,
    bedrock_connector,
    bedrock_model,
    openai_connector,
    openai_embedding_connector,
    titan_connector,
)
from ..support.openai_sdk import USER, WEATHER_TOOL, async_sdk, sdk
from ..support.servers import create_key
from ..support.timeouts import HANG_GUARD

# --------------------------------------------------------------------------- OpenAI-interface


def test_chat_relays_the_clients_fields_and_keeps_the_connectors_model(server, client, fake):
    model_id = client.model_for(openai_connector(fake, model=Scenario(tool="get_weather").to_model()))
    answer = sdk(server).chat.completions.create(
        model=model_id, messages=USER, temperature=0.3, top_p=0.9, max_completion_tokens=64, stop=["\n\n"],
        seed=7, user="u-1", tools=[WEATHER_TOOL], tool_choice="auto", response_format={"type": "text"})
    assert answer.choices[0].message.content == DEFAULT_TEXT
    call = answer.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == (TOOL_CALL_ID, "get_weather", TOOL_ARGUMENTS)
    assert answer.choices[0].finish_reason == "tool_calls"
    sent = fake.stats.requests[-1].body
    assert sent["model"] == "gpt-fake?tool=get_weather"  # the connector's, not the client's
    assert sent["messages"] == USER and "stream" not in sent
    assert {k: sent[k] for k in ("temperature", "top_p", "max_completion_tokens", "stop", "seed", "user",
                                 "tool_choice", "response_format")} == {
        "temperature": 0.3, "top_p": 0.9, "max_completion_tokens": 64, "stop": ["\n\n"], "seed": 7, "user": "u-1",
        "tool_choice": "auto", "response_format": {"type": "text"}}
    assert sent["tools"] == [WEATHER_TOOL]


def test_chat_stream_text_tool_call_and_usage_through_the_sdk_helpers(server, client, fake):
    model_id = client.model_for(openai_connector(fake, model=Scenario(tool="get_weather").to_model()))
    with sdk(server).chat.completions.stream(model=model_id, messages=USER, tools=[WEATHER_TOOL],
                                             stream_options={"include_usage": True}) as stream:
        text = "".join(event.delta for event in stream if event.type == "content.delta")
        final = stream.get_final_completion()
    assert text == DEFAULT_TEXT == final.choices[0].message.content
    call = final.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        TOOL_CALL_ID, "get_weather", json.loads(TOOL_ARGUMENTS))
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage.completion_tokens > 0 and final.usage.total_tokens > final.usage.completion_tokens
    sent = fake.stats.requests[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_legacy_completions_stream_and_not(server, client, fake):
    connector = openai_connector(fake, path="/v1/completions")
    connector["actions"][0]["request_body"] = '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}" }'
    model_id = client.model_for(connector)
    assert sdk(server).completions.create(model=model_id, prompt="Who is Hamlet?").choices[0].text == DEFAULT_TEXT
    streamed = sdk(server).completions.create(model=model_id, prompt="Who is Hamlet?", stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed) == DEFAULT_TEXT


def test_async_chat_stream_and_models(server, client, fake):
    model_id = client.model_for(openai_connector(fake))

    async def run() -> tuple[str, list[str]]:
        api = async_sdk(server)
        stream = await api.chat.completions.create(model=model_id, messages=USER, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        models = [model.id async for model in api.models.list()]
        await api.close()
        return text, models

    assert asyncio.run(run()) == (DEFAULT_TEXT, [model_id])


def test_embeddings_float_and_base64_decoded_by_the_sdk(server, client, fake):
    model_id = client.model_for(openai_embedding_connector(fake))
    api = sdk(server)
    floats = api.embeddings.create(model=model_id, input=["to be", "or not"], encoding_format="float")
    assert [d.embedding for d in floats.data] == [list(fake_vector("to be", 1536)), list(fake_vector("or not", 1536))]
    assert floats.usage.prompt_tokens > 0
    decoded = api.embeddings.create(model=model_id, input="to be", dimensions=8)  # the SDK asks for base64
    assert decoded.data[0].embedding == pytest.approx(list(fake_vector("to be", 8)), abs=1e-6)
    sent = fake.stats.requests[-1].body
    assert sent == {"input": "to be", "model": "text-embedding-ada-002", "dimensions": 8, "encoding_format": "base64"}
    with pytest.raises(openai.BadRequestError) as refused:
        api.embeddings.create(model=model_id, input=[[1, 2, 3]])
    assert refused.value.body["param"] == "input" and "token arrays" in refused.value.body["message"]


def test_embeddings_of_a_process_function_blueprint(server, client, bedrock):
    model_id = client.model_for(titan_connector(bedrock))
    for encoding in ({"encoding_format": "float"}, {}):  # without one, the SDK asks for base64 and decodes it
        answer = sdk(server).embeddings.create(model=model_id, input=["hello world", "goodbye"], **encoding)
        assert [d.index for d in answer.data] == [0, 1]
        assert answer.data[0].embedding == pytest.approx(list(fake_vector("hello world", 1536)), abs=1e-6)


# --------------------------------------------------------------------------- Bedrock Converse


def test_converse_chat_translates_the_request_and_the_answer(server, client, bedrock):
    bedrock_model(client, bedrock, tool_use=BEDROCK_TOOL)
    image = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": image}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rainy"},
        {"role": "user", "content": "And in Elsinore?"},
    ]
    answer = sdk(server).chat.completions.create(model="claude", messages=messages, max_tokens=100, temperature=0.5,
                                                 top_p=0.8, stop="END", tools=[WEATHER_TOOL], tool_choice="required")
    message = answer.choices[0].message
    assert message.content == BEDROCK_TEXT and answer.model == "claude"
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("tooluse_front0001", "get_weather", {"location": "Elsinore"})]
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens > 0
    sent = bedrock.stats.requests[-1]
    assert sent.operation == "converse" and sent.model_id == bedrock_connector(bedrock)["parameters"]["model"]
    body = sent.body
    assert body["system"] == [{"text": "You are terse."}]
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "What is this?"},
                                     {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call_1", "name": "get_weather",
                                                       "input": {"location": "Oslo"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "call_1", "content": [{"text": "rainy"}]}},
                                     {"text": "And in Elsinore?"}]},
    ]
    # the connector's inferenceConfig, the client's fields over it
    assert body["inferenceConfig"] == {"maxTokens": 100, "temperature": 0.5, "topP": 0.8, "stopSequences": ["END"]}
    assert body["toolConfig"] == {"tools": [{"toolSpec": {"name": "get_weather", "description": "The weather in a city",
                                                          "inputSchema": {"json": WEATHER_TOOL["function"]["parameters"]}}}],
                                  "toolChoice": {"any": {}}}
    assert body["additionalModelRequestFields"] == {"fake": {"tool_use": BEDROCK_TOOL}}  # the template's, kept


def test_converse_stream_text_tool_call_and_usage_through_the_sdk_helpers(server, client, bedrock):
    model_id = bedrock_model(client, bedrock, tool_use=BEDROCK_TOOL, chunks=5)
    chunks = list(sdk(server).chat.completions.create(model=model_id, messages=USER, tools=[WEATHER_TOOL],
                                                       stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    with sdk(server).chat.completions.stream(model=model_id, messages=USER, tools=[WEATHER_TOOL]) as stream:
        text = "".join(event.delta for event in stream if event.type == "content.delta")
        final = stream.get_final_completion()
    assert text and text == final.choices[0].message.content
    call = final.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "tooluse_front0001", "get_weather", {"location": "Elsinore"})
    assert final.choices[0].finish_reason == "tool_calls"
    assert bedrock.stats.requests[-1].operation == "converse-stream"


def test_async_converse_stream(server, client, bedrock):
    bedrock_model(client, bedrock)

    async def run() -> str:
        api = async_sdk(server)
        stream = await api.chat.completions.create(model="claude", messages=USER, stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
        await api.close()
        return text

    assert asyncio.run(run()) == BEDROCK_TEXT


def test_converse_refuses_what_it_cannot_do(server, client, bedrock):
    bedrock_model(client, bedrock)
    api = sdk(server)
    for kwargs, param in (({"n": 2}, "n"), ({"logprobs": True}, "logprobs"),
                          ({"messages": [{"role": "user", "content": [
                              {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]},
                           "messages[0].content")):
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(**{"model": "claude", "messages": USER, **kwargs})
        assert refused.value.status_code == 400 and refused.value.body["param"] == param
    assert len(bedrock.stats.requests) == 0  # refused before anything was sent


# --------------------------------------------------------------------------- errors, limits, hang-ups


def test_errors_are_the_sdks_exception_classes(server, client, fake, bedrock):
    api = sdk(server)
    with pytest.raises(openai.NotFoundError) as unknown:
        api.chat.completions.create(model="no such model", messages=USER)
    assert unknown.value.body == {"message": "The model `no such model` does not exist or is not deployed.",
                                  "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    client.model_for(openai_connector(fake))
    client.model_for(openai_connector(fake))  # two deployed models named alike
    with pytest.raises(openai.NotFoundError, match="ambiguous"):
        api.models.retrieve("openai gpt 3.5 turbo")
    limited = client.model_for(openai_connector(fake, model=Scenario(status=429, retry_after=3).to_model()))
    with pytest.raises(openai.RateLimitError) as throttled:
        api.chat.completions.create(model=limited, messages=USER, stream=True)
    assert throttled.value.response.headers["Retry-After"] == "3"
    assert throttled.value.body["type"] == "rate_limit_error"
    bedrock_model(client, bedrock, exception_type="throttlingException", exception_after=0)
    with pytest.raises(openai.RateLimitError):
        api.chat.completions.create(model="claude", messages=USER, stream=True)
    broken = client.model_for(openai_connector(fake, model=Scenario(status=500).to_model()))
    with pytest.raises(openai.InternalServerError) as failed:
        api.chat.completions.create(model=broken, messages=USER)
    assert failed.value.status_code == 502 and failed.value.body["type"] == "server_error"
    reply = client.call("POST", "/v1/chat/completions", body=["not", "an", "object"])
    assert reply.status == 400 and set(reply.body["error"]) == {"message", "type", "param", "code"}
    reply = client.call("GET", "/v1/no/such/route")
    assert reply.status == 404 and reply.body["error"]["type"] == "invalid_request_error"


def test_an_error_after_the_first_byte_is_an_error_event_and_no_done(server, client, fake):
    model_id = client.model_for(openai_connector(fake, model=Scenario(chunks=6, error_after=2).to_model()))
    stream = sdk(server).chat.completions.create(model=model_id, messages=USER, stream=True)
    received = 0
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        for _ in stream:
            received += 1
    assert received  # it had begun
    raw = client.call("POST", "/v1/chat/completions", body={"model": model_id, "messages": USER, "stream": True})
    assert raw.status == 200 and "[DONE]" not in raw.body and raw.body.rstrip().endswith("}")
    assert '"type":"server_error"' in raw.body


def test_keys_and_roles_apply(make_server, tmp_path, fake):
    server = make_server()
    model_id = Client(server.url).model_for(openai_connector(fake))
    user_key = create_key(tmp_path / "data", "user", "app")
    assert sdk(server, user_key).chat.completions.create(model=model_id, messages=USER).choices[0].message.content
    assert [m.id for m in sdk(server, user_key).models.list()] == [model_id]
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(server, "not-a-key").models.list()
    assert refused.value.body["code"] == "invalid_api_key"
    assert client_with(server.url, bearer(user_key)).call("GET", "/v1/models").status == 200


def test_model_rate_limit_applies_to_both_fronts(client, server, fake):
    model_id = client.register(client.create_connector(openai_connector(fake)),
                               rate_limiter={"limit": "1", "unit": "MINUTES"})
    sdk(server).chat.completions.create(model=model_id, messages=USER)
    with pytest.raises(openai.RateLimitError) as limited:
        sdk(server).chat.completions.create(model=model_id, messages=USER, stream=True)
    assert int(limited.value.response.headers["Retry-After"]) >= 1
    assert client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                       {"parameters": {"messages": USER}}).status == 429
    assert len(fake.stats.requests) == 1


def test_hang_up_cancels_the_upstream_and_frees_the_worker(make_server, fake):
    server = make_server(stream_workers=2)
    model_id = Client(server.url).model_for(openai_connector(fake, model=Scenario(chunks=1000, delay_ms=50).to_model()))
    body = json.dumps({"model": model_id, "messages": USER, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", urlsplit(server.url).port), timeout=HANG_GUARD)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    assert b"chat.completion.chunk" in sock.recv(65536)
    assert server.app.pool.active == 1
    sock.close()
    assert fake.stats.wait_for(lambda s: s.client_disconnects == 1, HANG_GUARD)
    assert server.app.pool.wait_idle(HANG_GUARD)
    assert server.app.in_flight.wait_idle(HANG_GUARD)
    assert fake.stats.streams_completed == 0
    metrics = Client(server.url).call("GET", "/metrics").body
    assert 'mlstream_streams_total{front="openai",outcome="client_gone"} 1' in metrics
    assert 'front="openai",route="/v1/chat/completions",method="POST",status="200"' in metrics


def test_the_documented_snippet_prints_the_streamed_answer(server, client, fake, capsys):
    """docs/openai.md: the SDK snippet as written (host, key and model filled in)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "openai.md").read_text(encoding="utf-8")
    [snippet] = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    model_id = client.model_for(openai_connector(fake))
    code = (snippet.replace("http://localhost:9200", server.url)
            .replace("<mlstream API key, or anything without keys>", "unused")
            .replace("<your_model_id or its unique name>", "openai gpt 3.5 turbo"))
    exec(compile(code, "docs/openai.md snippet", "exec"), {"__name__": "readme_snippet"})  # noqa: S102
    assert capsys.readouterr().out == DEFAULT_TEXT
    assert fake.stats.requests[0].body["stream_options"] == {"include_usage": True}
    assert model_id
