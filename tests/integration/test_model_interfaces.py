"""Issue 28, item 3: a model's ``interface`` (input / output JSON Schema) checked as ml-commons
checks it, on ``_predict``, ``_predict/stream`` and the OpenAI front, and the interfaces
ml-commons presets for known connectors.

The interfaces are RestMLRemoteInferenceIT's (registerRemoteModelWithInterface); the words
are TransportPredictionTaskAction.validateInputSchema's and MLPredictTaskRunner.validateOutputSchema's.
"""

from __future__ import annotations

import json
from typing import Any

from openai import BadRequestError, OpenAI

from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.wire import raw_request

ML = "/_plugins/_ml"
DESCRIBED = {"description": "This is a test description field"}
CORRECT = {
    "input": {"properties": {"parameters": {"properties": {"prompt": {"type": "string", **DESCRIBED}}}}},
    "output": {"properties": {"inference_results": {"type": "array", "items": {"type": "object", "properties": {
        "output": {"type": "array", "items": {"properties": {"name": {"type": "string", **DESCRIBED},
                                                              "dataAsMap": {"type": "object", **DESCRIBED}}},
                   **DESCRIBED},
        "status_code": {"type": "integer", **DESCRIBED}}}, **DESCRIBED}}},
}
WRONG_INPUT = {"input": {"properties": {"parameters": {"properties": {"prompt": {"type": "integer", **DESCRIBED}}}}}}
WRONG_OUTPUT = {"output": {"properties": {"inference_results": {"type": "array", "items": {"type": "object",
                "properties": {"output": {"type": "integer", **DESCRIBED}}}}}}}
SAY = {"parameters": {"prompt": "Say this is a test"}}
INPUT_WORDS = ("Error validating input schema, if you think this is expected, please update your 'input' field "
               "in the 'interface' field for this model: Validation failed: ")
OUTPUT_WORDS = ("Error validating output schema, if you think this is expected, please update your 'output' field "
                "in the 'interface' field for this model: Validation failed: ")


def completions_connector(fake) -> dict[str, Any]:
    """RestMLRemoteInferenceIT's completions connector, over the fake."""
    connector = openai_connector(fake, model="gpt-3.5-turbo-instruct", path="/v1/completions")
    connector["parameters"].update({"max_tokens": 7, "temperature": 0})
    connector["actions"][0]["request_body"] = (
        '{ "model": "${parameters.model}", "prompt": "${parameters.prompt}",  '
        '"max_tokens": ${parameters.max_tokens},  "temperature": ${parameters.temperature} }')
    return connector


def register(client, connector: dict[str, Any], interface: dict[str, Any] | None) -> str:
    extra = {} if interface is None else {"interface": interface}
    return client.register(client.create_connector(connector), **extra)


def refusal(reply) -> str:
    assert reply.status == 400, (reply.status, reply.body)
    assert reply.body["error"]["type"] == "status_exception"
    return reply.body["error"]["reason"]


def test_an_interface_is_stored_as_ml_commons_stores_it(client, fake):
    """MLModel: {"input": "<schema as JSON text>", "output": ...}, other keys dropped."""
    model_id = register(client, completions_connector(fake), {**CORRECT, "other": {}})
    stored = client.ok("GET", f"{ML}/models/{model_id}")["interface"]
    assert set(stored) == {"input", "output"}
    assert json.loads(stored["input"]) == CORRECT["input"] and json.loads(stored["output"]) == CORRECT["output"]
    # RestMLRemoteInferenceIT registers {"input": {}, "output": {}}: schemas that take anything
    model_id = register(client, completions_connector(fake), {"input": {}, "output": {}})
    assert client.ok("GET", f"{ML}/models/{model_id}")["interface"] == {"input": "{}", "output": "{}"}
    client.ok("POST", f"{ML}/models/{model_id}/_predict", SAY)


def test_a_correct_interface_lets_the_call_through(client, fake):
    model_id = register(client, completions_connector(fake), CORRECT)
    answer = client.ok("POST", f"{ML}/models/{model_id}/_predict", SAY)
    assert answer["inference_results"][0]["output"][0]["dataAsMap"]["choices"][0]["text"]


def test_a_wrong_input_interface_refuses_before_the_provider(client, fake):
    model_id = register(client, completions_connector(fake), WRONG_INPUT)
    schema = json.dumps(WRONG_INPUT["input"], separators=(",", ":"))
    assert refusal(client.call("POST", f"{ML}/models/{model_id}/_predict", SAY)) == (
        INPUT_WORDS + "[/parameters/prompt: string found, integer expected] for instance: "
        '{"algorithm":"REMOTE","parameters":{"prompt":"Say this is a test"},"action_type":"PREDICT"} '
        f"with schema: {schema}")
    assert fake.stats.requests == []


def test_a_wrong_output_interface_refuses_the_answer(client, fake):
    model_id = register(client, completions_connector(fake), WRONG_OUTPUT)
    reason = refusal(client.call("POST", f"{ML}/models/{model_id}/_predict", SAY))
    assert reason.startswith(OUTPUT_WORDS + "[/inference_results/0/output: array found, integer expected] "
                             'for instance: {"inference_results":[{"output":[{"name":"response"')
    assert len(fake.stats.requests) == 1  # the output is checked once the provider answered


def test_parameters_sent_as_json_text_are_read_as_json(client, fake):
    """processRemoteInferenceInputDataSetParametersValue: a string parameter is parsed as JSON
    unless the schema wants a string; a JSON value where a string is wanted is its text."""
    interface = {"input": {"properties": {"parameters": {"properties": {
        "messages": {"type": "array"}, "max_tokens": {"type": "integer"}, "user": {"type": "string"}}}}}}
    model_id = register(client, openai_connector(fake), interface)
    body = {"parameters": {"messages": json.dumps(SEED_MESSAGES), "max_tokens": "7", "user": 42}}
    client.ok("POST", f"{ML}/models/{model_id}/_predict", body)
    refused = client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": "not json"}})
    assert "/parameters/messages: string found, array expected" in refusal(refused)


def test_the_stream_route_checks_the_input_with_stream_set(client, fake):
    """TransportPredictionStreamTaskAction.validateInputSchema, on parameters holding
    "stream": "true" (read as the JSON true)."""
    interface = {"input": {"properties": {"parameters": {"properties": {"stream": {"const": True}},
                                                         "required": ["messages", "stream"]}}},
                 "output": WRONG_OUTPUT["output"]}
    model_id = register(client, openai_connector(fake), interface)
    streamed = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body()).encode())
    assert streamed.status == 200  # a stream's output is not checked: its events are relayed as they come
    assert streamed.events()[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
    refused = client.call("POST", f"{ML}/models/{model_id}/_predict/stream", {"parameters": {}})
    assert refusal(refused).startswith(INPUT_WORDS + "[/parameters: required property 'messages' not found]")
    assert len(fake.stats.requests) == 1


def test_the_openai_front_refuses_in_its_own_error_body(client, fake):
    interface = {"input": {"properties": {"parameters": {"properties": {"temperature": {"maximum": 1}}}}}}
    model_id = register(client, openai_connector(fake), interface)
    sdk = OpenAI(base_url=client.base_url + "/v1", api_key="unused", max_retries=0)
    sdk.chat.completions.create(model=model_id, messages=SEED_MESSAGES, temperature=0.5)
    try:
        sdk.chat.completions.create(model=model_id, messages=SEED_MESSAGES, temperature=1.5)
    except BadRequestError as error:
        body = error.body
    else:
        raise AssertionError("the interface let temperature 1.5 through")
    assert body["type"] == "invalid_request_error"
    assert body["message"].startswith(INPUT_WORDS + "[/parameters/temperature: must have a maximum value of 1]")
    assert len(fake.stats.requests) == 1


def test_an_interface_that_is_not_a_json_schema_is_refused(client, fake):
    connector_id = client.create_connector(openai_connector(fake))
    for interface, words in (({"input": "{not json"}, "[interface.input] is not JSON"),
                             ({"output": {"type": "no such type"}}, "[interface.output] is not a JSON Schema"),
                             ([], "[interface] must be a JSON object")):
        reply = client.call("POST", f"{ML}/models/_register", {"name": "m", "function_name": "remote",
                                                                 "connector_id": connector_id, "interface": interface})
        assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body


def test_an_interface_update_applies_to_the_next_call(client, fake):
    model_id = register(client, completions_connector(fake), None)
    client.ok("POST", f"{ML}/models/{model_id}/_predict", SAY)
    client.ok("PUT", f"{ML}/models/{model_id}", {"interface": WRONG_INPUT})
    assert refusal(client.call("POST", f"{ML}/models/{model_id}/_predict", SAY)).startswith(INPUT_WORDS)


# --- presets (ModelInterfaceUtils) ------------------------------------------------------------

def bedrock_named(fake, model: str, post_process: str | None = None) -> dict[str, Any]:
    """A connector ml-commons presets an interface for (service_name and model are all it
    reads), over the fake's chat completions."""
    connector = openai_connector(fake)
    connector["parameters"].update({"service_name": "bedrock", "model": model})
    if post_process is not None:
        connector["actions"][0]["post_process_function"] = post_process
    return connector


def test_a_known_connector_gets_its_preset_interface(client, fake):
    model_id = register(client, bedrock_named(fake, "anthropic.claude-v2"), None)
    interface = client.ok("GET", f"{ML}/models/{model_id}")["interface"]
    assert json.loads(interface["input"])["properties"]["parameters"]["required"] == ["inputs"]
    assert json.loads(interface["output"])["properties"]["inference_results"]["items"]["properties"]["output"][
        "items"]["properties"]["dataAsMap"]["required"] == ["type", "completion"]
    # ... and acts on it: the input needs "inputs"; the fake's chat answer is no Claude v2 completion
    refused = client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
    assert "/parameters: required property 'inputs' not found" in refusal(refused)
    assert fake.stats.requests == []
    body = {"parameters": {"messages": SEED_MESSAGES, "inputs": "Hello"}}
    assert "/inference_results/0/output/0/dataAsMap: required property 'type' not found" in refusal(
        client.call("POST", f"{ML}/models/{model_id}/_predict", body))


def test_the_preset_follows_the_post_process_function(client, fake):
    with_function = register(client, bedrock_named(fake, "amazon.titan-embed-text-v1",
                                                   "connector.post_process.bedrock.embedding"), None)
    without = register(client, bedrock_named(fake, "amazon.titan-embed-text-v1"), None)
    output_of = lambda model_id: json.loads(client.ok("GET", f"{ML}/models/{model_id}")["interface"]["output"])  # noqa: E731
    assert "data_type" in output_of(with_function)["properties"]["inference_results"]["items"]["properties"][
        "output"]["items"]["properties"]
    assert "dataAsMap" in output_of(without)["properties"]["inference_results"]["items"]["properties"][
        "output"]["items"]["properties"]


def test_a_given_interface_wins_and_unknown_connectors_get_none(client, fake):
    given = register(client, bedrock_named(fake, "anthropic.claude-v2"), {"input": {}})
    assert client.ok("GET", f"{ML}/models/{given}")["interface"] == {"input": "{}"}
    plain = register(client, openai_connector(fake), None)
    assert "interface" not in client.ok("GET", f"{ML}/models/{plain}")
    inline = client.ok("POST", f"{ML}/models/_register", {
        "name": "inline", "function_name": "remote", "connector": bedrock_named(fake, "anthropic.claude-v2")})
    assert "interface" in client.ok("GET", f"{ML}/models/{inline['model_id']}")
