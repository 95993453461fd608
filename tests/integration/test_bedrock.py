"""Bedrock Converse and ConverseStream through mlstream, against the SigV4-checking fake."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.testing.fake_bedrock import DEFAULT_TEXT, FakeBedrock, Scenario, fake_tokens

from ..support.clients import Client
from ..support.connectors import bedrock_connector, maps
from ..support.connectors import bedrock_stream as stream
from ..support.wire import raw_request

def predict(client: Client, model_id: str, **fake: Any):
    """The non-stream route, read raw so the error body's exact bytes can be checked."""
    body = {"parameters": {"inputs": "Who is Hamlet?", "fake": fake}}
    return raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict",
                       json.dumps(body).encode())


def secrets_of(fake: FakeBedrock) -> list[str]:
    return [fake.secret_key] + ([fake.session_token] if fake.session_token else [])


def assert_error(response, status: int, message: str, secrets: list[str]) -> str:
    """``response`` is ``status`` with mlstream's JSON error body (``MLStreamError.to_body``)
    carrying the provider's ``message``, and no secret anywhere in it; returns the reason."""
    assert response.status == status, (response.status, response.body)
    assert response.headers["content-type"].startswith("application/json")
    body = json.loads(response.body)
    reason = body["error"]["reason"]
    cause = {"type": "remote_inference_exception", "reason": reason}
    assert body == {"error": {"root_cause": [cause], **cause}, "status": status}
    assert reason.startswith("Error from remote service") and message in reason, reason
    for secret in secrets:
        assert secret.encode() not in response.body
    return reason


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
    # usage under Bedrock's own names, as the non-stream answer carries it
    assert set(last["usage"]) == {"inputTokens", "outputTokens", "totalTokens"}, last["usage"]
    assert last["usage"]["outputTokens"] == len(fake_tokens(Scenario())) and last["usage"]["inputTokens"] > 0
    assert last["usage"]["totalTokens"] == last["usage"]["inputTokens"] + last["usage"]["outputTokens"]
    sent = bedrock.stats.requests[-1]
    assert sent.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
    assert sent.body["inferenceConfig"] == {"maxTokens": 512, "temperature": 0.2}
    assert bedrock.stats.signature_failures == 0
    # the same request without streaming: the same usage object
    whole = client.ok("POST", f"/_plugins/_ml/models/{model_id}/_predict",
                      {"parameters": {"inputs": "Who is Hamlet?", "fake": {}}})
    assert whole["inference_results"][0]["output"][0]["dataAsMap"]["usage"] == last["usage"]


def test_session_token_goes_in_x_amz_security_token(client, token_bedrock):
    model_id = client.model_for(bedrock_connector(token_bedrock))
    response = stream(client, model_id)
    assert response.status == 200
    assert token_bedrock.stats.requests[-1].headers["x-amz-security-token"] == "FwoGZXIvYXdzEFAKETOKEN"
    without = client.model_for(bedrock_connector(token_bedrock, session_token=""))
    assert_error(stream(client, without), 403, "The security token included in the request is invalid.",
                 secrets_of(token_bedrock))


@pytest.mark.parametrize("session_token", [None, "FwoGZXIvYXdzEFAKETOKEN"], ids=["keys", "session-token"])
def test_wrong_secret_is_a_403_for_the_caller(client, session_token):
    wrong = "wrong-secret-key-0123456789"
    mismatch = "The request signature we calculated does not match the signature you provided."
    with FakeBedrock(session_token=session_token) as bedrock:
        model_id = client.model_for(bedrock_connector(bedrock, secret_key=wrong))
        # AWS's message names the canonical request it expected, signed headers included:
        # the session token is one of them and must not be echoed.
        secrets = [wrong, *secrets_of(bedrock)]
        streamed = assert_error(stream(client, model_id), 403, mismatch, secrets)
        assert "/converse-stream" in streamed
        whole = assert_error(predict(client, model_id), 403, mismatch, secrets)
        assert "/converse\n" in whole
        assert bedrock.stats.signature_failures == 2


def test_throttling_before_the_first_event_is_a_429(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    throttled = "Too many requests, please wait before trying again."
    for knobs in ({"throttle": "http"}, {"exception_after": 0, "exception_type": "throttlingException"}):
        response = stream(client, model_id, **knobs)
        reason = assert_error(response, 429, throttled, secrets_of(bedrock))
        assert int(response.headers["retry-after"]) >= 1
        if "exception_type" in knobs:  # an exception frame: its type is named too
            assert "throttlingException" in reason


def test_validation_exception_first_is_a_400(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, exception_after=0, exception_type="validationException")
    reason = assert_error(response, 400, "The request failed validation mid-stream (fake Bedrock, as asked).",
                          secrets_of(bedrock))
    assert reason == ("Error from remote service: validationException: "
                      "The request failed validation mid-stream (fake Bedrock, as asked).")


def test_exception_mid_stream_is_the_final_error_event(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, exception_after=3)
    assert response.status == 200 and response.complete
    events = response.events()
    assert len(events) == 4
    assert events[-1] == {"error": "Error from remote service: modelStreamErrorException: "
                                   "The model stream failed (fake Bedrock, as asked)."}
    assert [e["inference_results"][0]["output"][0]["dataAsMap"]["content"] for e in events[:-1]] == \
        fake_tokens(Scenario())[:3]


@pytest.mark.parametrize("knobs, says", [({"truncate_after": 2}, "the provider's event stream ended inside a frame"),
                                         ({"bad_crc_after": 2}, "the provider's event stream is corrupt"),
                                         ({"cut_after": 2}, "the connection to the provider at ")],
                         ids=["truncated-frame", "bad-crc", "connection-cut"])
def test_broken_frames_end_in_an_error_event_not_a_hang(client, bedrock, knobs, says):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, **knobs)
    assert response.status == 200 and response.complete
    events = response.events()
    assert set(events[-1]) == {"error"} and events[-1]["error"].startswith(says), events[-1]
    assert bedrock.secret_key.encode() not in response.body
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


# --- bedrock/converse for any Converse model ------------------------------------------------

PROFILE_ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.deepseek.r1-v1:0"
# Converse fields beyond messages and inferenceConfig, as a user would write them; the
# fake's knobs still ride in additionalModelRequestFields.
GENERIC_BODY = ('{ "messages": [ { "role": "user", "content": [ { "text": "${parameters.inputs}" } ] } ], '
                '"system": [{"text": "Be brief."}], '
                '"guardrailConfig": {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled"}, '
                '"performanceConfig": {"latency": "optimized"}, '
                '"additionalModelRequestFields": {"top_k": 5, "fake": ${parameters.fake}} }')


@pytest.mark.parametrize("model, wire_id", [
    ("us.deepseek.r1-v1:0", "us.deepseek.r1-v1%3A0"),
    (PROFILE_ARN, "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.deepseek.r1-v1%3A0"),
    (PROFILE_ARN.replace("/", "%2F"),
     "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.deepseek.r1-v1%3A0"),
], ids=["profile-id", "arn", "arn-pre-encoded"])
def test_generic_converse_any_model_reasoning_in_its_own_field(client, bedrock, model, wire_id):
    connector = bedrock_connector(bedrock)
    connector["parameters"]["model"] = model
    connector["actions"][0]["request_body"] = GENERIC_BODY
    model_id = client.model_for(connector)
    reasoning = "The user asks about a play; answer briefly."
    response = stream(client, model_id, "bedrock/converse", reasoning=reasoning, chunks=3)
    assert response.status == 200 and response.complete
    events = maps(response)
    thinking = [e for e in events if "reasoning_content" in e]
    assert "".join(e["reasoning_content"] for e in thinking) == reasoning
    assert all(e == {"content": "", "reasoning_content": e["reasoning_content"], "is_last": False} for e in thinking)
    # the answer's content holds the text only, never the reasoning
    assert "".join(e["content"] for e in events) == "".join(fake_tokens(Scenario(chunks=3)))
    assert events[-1]["is_last"] and events[-1]["finish_reason"] == "end_turn"
    assert events[-1]["usage"]["outputTokens"] > 0
    sent = bedrock.stats.requests[-1]
    assert sent.path == f"/model/{wire_id}/converse-stream" and sent.model_id == model.replace("%2F", "/")
    assert bedrock.stats.signature_failures == 0
    # the whole Converse body went through
    # its guardrail as ml-commons streams one (#4550): asynchronously
    assert sent.body["guardrailConfig"] == {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled",
                                            "streamProcessingMode": "async"}
    assert sent.body["performanceConfig"] == {"latency": "optimized"}
    assert sent.body["system"] == [{"text": "Be brief."}]
    assert sent.body["additionalModelRequestFields"]["top_k"] == 5
    # non-stream: the same route, the Converse JSON with its reasoning block
    whole = predict(client, model_id, reasoning=reasoning)
    assert whole.status == 200
    content = json.loads(whole.body)["inference_results"][0]["output"][0]["dataAsMap"]["output"]["message"]["content"]
    assert content[0]["reasoningContent"]["reasoningText"]["text"] == reasoning
    assert bedrock.stats.requests[-1].path == f"/model/{wire_id}/converse"
    assert bedrock.stats.signature_failures == 0


def test_deepseek_r1_name_is_the_generic_dialect(client, bedrock):
    model_id = client.model_for(bedrock_connector(bedrock))
    response = stream(client, model_id, "bedrock/converse/deepseek_r1", reasoning="Hmm.")
    events = maps(response)
    assert [e["reasoning_content"] for e in events if "reasoning_content" in e] == ["Hmm."]
    assert "".join(e["content"] for e in events) == DEFAULT_TEXT
