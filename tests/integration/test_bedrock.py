"""Bedrock Converse and ConverseStream through mlstream, against the SigV4-checking fake."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock, Scenario, fake_tokens

from .conftest import Client, raw_request

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
# The ml-commons Bedrock Converse blueprint, verbatim but for the host (the fake on
# loopback) and a pass-through for the fake's knobs; inferenceConfig shows that the
# whole body reaches ConverseStream.
REQUEST_BODY = ('{ "messages": [ { "role": "user", "content": [ { "text": "${parameters.inputs}" } ] } ], '
                '"inferenceConfig": {"maxTokens": 512, "temperature": 0.2}, '
                '"additionalModelRequestFields": {"fake": ${parameters.fake}} }')


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock() as fake:
        yield fake


def bedrock_connector(fake: FakeBedrock, **credential_overrides: Any) -> dict[str, Any]:
    credential = {"access_key": fake.access_key, "secret_key": fake.secret_key}
    if fake.session_token:
        credential["session_token"] = fake.session_token
    credential.update(credential_overrides)
    return {
        "name": "Amazon Bedrock Converse",
        "description": "Connector for Amazon Bedrock Converse",
        "version": 1,
        "protocol": "aws_sigv4",
        "credential": credential,
        "parameters": {"region": fake.region, "service_name": "bedrock", "model": MODEL,
                       "endpoint": fake.url.removeprefix("http://"), "fake": {}},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/converse",
            "request_body": REQUEST_BODY,
        }],
    }


def stream(client: Client, model_id: str, interface: str | None = "bedrock/converse/claude", **fake: Any):
    parameters: dict[str, Any] = {"inputs": "Who is Hamlet?", "fake": fake}
    if interface:
        parameters["_llm_interface"] = interface
    return raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                       json.dumps({"parameters": parameters}).encode())


def maps(response) -> list[dict[str, Any]]:
    return [e["inference_results"][0]["output"][0]["dataAsMap"] for e in response.events()]


def test_predict_returns_the_converse_json_and_filters_it(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"inputs": "Hi", "fake": {}}})
    answer = whole["inference_results"][0]["output"][0]["dataAsMap"]
    assert answer["output"]["message"]["content"][0]["text"] == DEFAULT_TEXT
    assert answer["stopReason"] == "end_turn"
    sent = bedrock.stats.requests[-1]
    assert sent.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    assert bedrock.stats.signature_failures == 0
    filtered = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {
        "inputs": "Hi", "fake": {}, "response_filter": "$.output.message.content[0].text"}})
    assert filtered["inference_results"][0]["output"][0]["dataAsMap"] == {"response": DEFAULT_TEXT}


@pytest.mark.parametrize("interface", ["bedrock/converse/claude", "Bedrock/Converse", None])
def test_stream_text_usage_and_stop_reason(client, bedrock, interface):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, interface)
    assert response.status == 200 and response.complete
    assert response.headers["content-type"].startswith("text/event-stream")
    events = maps(response)
    assert "".join(e["content"] for e in events) == DEFAULT_TEXT
    assert [e["content"] for e in events[:-1]] == fake_tokens(Scenario())
    last = events[-1]
    assert last["is_last"] is True and last["content"] == ""
    assert last["finish_reason"] == "end_turn"
    assert last["usage"]["output_tokens"] == len(fake_tokens(Scenario())) and last["usage"]["input_tokens"] > 0
    sent = bedrock.stats.requests[-1]
    assert sent.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
    assert sent.body["inferenceConfig"] == {"maxTokens": 512, "temperature": 0.2}
    assert bedrock.stats.signature_failures == 0


@pytest.fixture
def token_bedrock() -> Iterator[FakeBedrock]:
    with FakeBedrock(session_token="FwoGZXIvYXdzEFAKETOKEN") as fake:
        yield fake


def test_session_token_goes_in_x_amz_security_token(client, token_bedrock):
    model_id = client.model_for(bedrock_connector(token_bedrock))
    response = stream(client, model_id)
    assert response.status == 200
    assert token_bedrock.stats.requests[-1].headers["x-amz-security-token"] == "FwoGZXIvYXdzEFAKETOKEN"
    without = client.model_for(bedrock_connector(token_bedrock, session_token=""))
    assert stream(client, without).status == 403


def test_wrong_secret_is_a_403_for_the_caller(client, bedrock):
    wrong = "wrong-secret-key-0123456789"
    model_id = client.model_for(bedrock_connector(bedrock, secret_key=wrong))
    response = stream(client, model_id)
    assert response.status == 403
    body = json.loads(response.body)
    assert body["status"] == 403 and "signature" in body["error"]["reason"].lower()
    assert wrong.encode() not in response.body
    reply = client.call("POST", f"/_plugins/_ml/models/{model_id}/_predict", {"parameters": {"inputs": "Hi", "fake": {}}})
    assert reply.status == 403
    assert bedrock.stats.signature_failures == 2


def test_throttling_before_the_first_event_is_a_429(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    for knobs in ({"throttle": "http"}, {"exception_after": 0, "exception_type": "throttlingException"}):
        response = stream(client, model_id, **knobs)
        assert response.status == 429, (knobs, response.body)
        assert int(response.headers["retry-after"]) >= 1
        assert json.loads(response.body)["status"] == 429


def test_validation_exception_first_is_a_400(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, exception_after=0, exception_type="validationException")
    assert response.status == 400


def test_exception_mid_stream_is_the_final_error_event(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, exception_after=3)
    assert response.status == 200 and response.complete
    events = response.events()
    assert len(events) == 4 and set(events[-1]) == {"error"}
    assert "modelStreamErrorException" in events[-1]["error"]
    assert [e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events[:-1]] == \
        fake_tokens(Scenario())[:3]


@pytest.mark.parametrize("knobs", [{"truncate_after": 2}, {"bad_crc_after": 2}, {"cut_after": 2}],
                         ids=["truncated-frame", "bad-crc", "connection-cut"])
def test_broken_frames_end_in_an_error_event_not_a_hang(client, bedrock, knobs):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, **knobs)
    assert response.status == 200 and response.complete
    events = response.events()
    assert set(events[-1]) == {"error"}
    assert [e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events[:-1]] == \
        fake_tokens(Scenario())[:2]


def test_tool_use_is_assembled_into_one_event(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    tool = {"name": "get_weather", "input": {"city": "Elsinore", "days": [1, 2], "units": "metric"},
            "tool_use_id": "tooluse_abc123"}
    response = stream(client, model_id, chunks=3, tool_use=tool)
    events = maps(response)
    tool_events = [e["content"] for e in events if isinstance(e["content"], dict)]
    assert tool_events == [{"toolUse": {"toolUseId": "tooluse_abc123", "name": "get_weather",
                                        "input": {"city": "Elsinore", "days": [1, 2], "units": "metric"}}}]
    assert events[-1]["is_last"] and events[-1]["finish_reason"] == "tool_use"
    assert "".join(e["content"] for e in events if isinstance(e["content"], str)) == \
        "".join(fake_tokens(Scenario(chunks=3)))
