"""Issue 28, item 1: the gaps ml-commons' own REST ITs found, each as ml-commons' source has it.

Over real sockets against the fake OpenAI provider; what reached the provider is checked
beside what reached the client. The class each rule comes from is named in the test.
"""

from __future__ import annotations

import json
from typing import Any

from opensearchpy import OpenSearch

from ..support.clients import Client
from ..support.connectors import openai_connector
from ..support.streams import SEED_MESSAGES, stream_body
from ..support.wire import raw_request

ML = "/_plugins/_ml"
# RestMLRemoteInferenceIT's completions connector body (getConnectorBodyBySkipValidatingMissingParameter)
COMPLETIONS_BODY = ('{ "model": "${parameters.model}", "prompt": "${parameters.prompt}",  '
                    '"max_tokens": ${parameters.max_tokens},  "temperature": ${parameters.temperature} }')


def completions_connector(fake, **parameters: Any) -> dict[str, Any]:
    connector = openai_connector(fake, model="gpt-3.5-turbo-instruct", path="/v1/completions")
    connector["parameters"].update({"max_tokens": 7, "temperature": 0, **parameters})
    connector["actions"][0]["request_body"] = COMPLETIONS_BODY
    return connector


def sent_bodies(fake) -> list[Any]:
    return [request.body for request in fake.stats.requests]


# --- "algorithm" in a _predict body -------------------------------------------------------

def test_a_predict_body_may_carry_algorithm(client, fake):
    """RemoteInferenceMLInput skips fields it does not take: ml-commons' Java client always
    sends "algorithm"; the model's function decides."""
    model_id = client.model_for(openai_connector(fake))
    body = {"algorithm": "REMOTE", "parameters": {"messages": SEED_MESSAGES}}
    answer = client.ok("POST", f"{ML}/models/{model_id}/_predict", body)
    assert answer["inference_results"][0]["status_code"] == 200
    assert sent_bodies(fake)[-1]["messages"] == SEED_MESSAGES
    # the stream route reads the same body
    streamed = client.call("POST", f"{ML}/models/{model_id}/_predict/stream", {"algorithm": "REMOTE", **stream_body()})
    assert streamed.status == 200


def test_opensearch_py_predict_with_algorithm(server, fake):
    os_client = OpenSearch(hosts=[server.url], timeout=20)
    model_id = Client(server.url).model_for(openai_connector(fake))
    answer = os_client.plugins.ml.predict(algorithm_name="remote", model_id=model_id,
                                          body={"algorithm": "REMOTE", "parameters": {"messages": SEED_MESSAGES}})
    assert answer["inference_results"][0]["output"][0]["name"] == "response"


# --- parameters.stream on _predict/stream --------------------------------------------------

def test_stream_sets_the_stream_parameter(client, fake):
    """RestMLPredictionStreamAction.getRequest: parameters.put("stream", "true")."""
    connector = openai_connector(fake)
    connector["actions"][0]["request_body"] = (
        '{ "model": "${parameters.model}", "messages": ${parameters.messages}, "stream": ${parameters.stream}, '
        '"user": "stream=${parameters.stream}" }')
    model_id = client.model_for(connector)
    response = raw_request(client.base_url, "POST", f"{ML}/models/{model_id}/_predict/stream",
                           json.dumps(stream_body(stream=False)).encode())
    assert response.status == 200, response.body
    assert response.events()[-1]["inference_results"][0]["output"][0]["dataAsMap"]["is_last"] is True
    sent = sent_bodies(fake)[-1]
    assert sent["stream"] is True and sent["user"] == "stream=true"  # the request's own value is overridden
    # a non-stream predict has no such parameter: the template cannot be filled
    refused = client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"messages": SEED_MESSAGES}})
    assert refused.status == 400 and "stream" in refused.body["error"]["reason"]


# --- skip_validating_missing_parameters ------------------------------------------------------

PROMPT_WITH_PLACEHOLDER = {"parameters": {"prompt": "Say this is a ${parameters.test}"}}


def test_missing_parameters_are_refused_by_default(client, fake):
    """RestMLRemoteInferenceIT.testPredictRemoteModelWithSkipValidatingMissingParameterMissing."""
    model_id = client.model_for(completions_connector(fake))
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict", PROMPT_WITH_PLACEHOLDER)
    assert reply.status == 400
    assert "Some parameter placeholder not filled in payload: test" in reply.body["error"]["reason"]
    assert fake.stats.requests == []


def test_skip_validating_missing_parameters_in_the_connector(client, fake):
    """...ParameterEnabled: the payload goes as rendered, the placeholder left in it."""
    model_id = client.model_for(completions_connector(fake, skip_validating_missing_parameters="true"))
    answer = client.ok("POST", f"{ML}/models/{model_id}/_predict", PROMPT_WITH_PLACEHOLDER)
    assert answer["inference_results"][0]["output"][0]["dataAsMap"]["choices"][0]["text"]
    assert sent_bodies(fake)[-1]["prompt"] == "Say this is a ${parameters.test}"


def test_skip_validating_missing_parameters_false_still_refuses(client, fake):
    """...ParameterDisabled."""
    model_id = client.model_for(completions_connector(fake, skip_validating_missing_parameters="false"))
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict", PROMPT_WITH_PLACEHOLDER)
    assert reply.status == 400 and "placeholder not filled in payload: test" in reply.body["error"]["reason"]
    assert fake.stats.requests == []


def test_skip_validating_missing_parameters_as_a_request_parameter(client, fake):
    """RemoteConnectorExecutor reads it from the merged parameters: the request's count too,
    in any case (Boolean.parseBoolean), or as a JSON true."""
    model_id = client.model_for(completions_connector(fake))
    for value in ("TRUE", True):
        body = {"parameters": {**PROMPT_WITH_PLACEHOLDER["parameters"], "skip_validating_missing_parameters": value}}
        client.ok("POST", f"{ML}/models/{model_id}/_predict", body)
        assert sent_bodies(fake)[-1]["prompt"] == "Say this is a ${parameters.test}"


def test_skip_applies_to_the_payload_only(client, fake):
    """validatePayload is about the payload: an unfilled header placeholder is still refused."""
    connector = completions_connector(fake, skip_validating_missing_parameters="true")
    connector["actions"][0]["headers"]["X-Tenant"] = "${parameters.tenant}"
    model_id = client.model_for(connector)
    reply = client.call("POST", f"{ML}/models/{model_id}/_predict", {"parameters": {"prompt": "hi"}})
    assert reply.status == 400 and "tenant" in reply.body["error"]["reason"]
    assert fake.stats.requests == []


# --- the connector's version ---------------------------------------------------------------

def test_a_connectors_version_comes_back_as_text(server, fake):
    """MLCreateConnectorInput.parse reads version with parser.text(): 1 is stored as "1"."""
    client = Client(server.url)
    connector_id = client.create_connector(openai_connector(fake))  # "version": 1
    assert client.ok("GET", f"{ML}/connectors/{connector_id}")["version"] == "1"
    os_client = OpenSearch(hosts=[server.url], timeout=20)
    assert os_client.plugins.ml.get_connector(connector_id=connector_id)["version"] == "1"
    inline = client.ok("POST", f"{ML}/models/_register", {"name": "inline", "function_name": "remote",
                                                           "connector": openai_connector(fake, version=1.5)})
    assert client.ok("GET", f"{ML}/models/{inline['model_id']}")["connector"]["version"] == "1.5"
    client.ok("PUT", f"{ML}/connectors/{connector_id}", {"version": 2})
    assert client.ok("GET", f"{ML}/connectors/{connector_id}")["version"] == "2"


# --- not found, in ml-commons' words ---------------------------------------------------------

def reason(reply, status: int = 404) -> str:
    assert reply.status == status, (reply.status, reply.body)
    assert reply.body["status"] == status
    return reply.body["error"]["reason"]


def test_not_found_with_nothing_stored(client):
    """The "empty resources" ITs (RestMLGetModelActionIT, RestMLGetModelGroupActionIT,
    RestMLGetTaskActionIT): ml-commons' index does not exist yet."""
    unknown = "111222333"
    assert reason(client.call("GET", f"{ML}/models/{unknown}")) == "Fail to find model"
    assert reason(client.call("GET", f"{ML}/model_groups/{unknown}")) == "Failed to find model group index"
    assert reason(client.call("GET", f"{ML}/tasks/{unknown}")) == "Failed to find task"
    assert reason(client.call("DELETE", f"{ML}/tasks/{unknown}")) == "Failed to find task"
    assert reason(client.call("GET", f"{ML}/connectors/{unknown}")) == "Failed to find connector"
    assert reason(client.call("PUT", f"{ML}/connectors/{unknown}", {"description": "x"})) == "Failed to find connector"
    assert reason(client.call("DELETE", f"{ML}/connectors/{unknown}")) == "Failed to find connector"
    assert reason(client.call("PUT", f"{ML}/model_groups/{unknown}", {"description": "x"})) == \
        "Failed to find model group"
    assert reason(client.call("DELETE", f"{ML}/model_groups/{unknown}")) == "Failed to find model group"
    assert reason(client.call("DELETE", f"{ML}/models/{unknown}")) == "Failed to find model"
    # MLModelManager.getModel passes OpenSearch's own error on: the model index is missing
    for path, body in (("/_deploy", None), ("/_predict", {"parameters": {}})):
        reply = client.call("POST", f"{ML}/models/{unknown}{path}", body)
        assert reason(reply) == "no such index [.plugins-ml-model]"
        assert reply.body["error"]["type"] == "index_not_found_exception"


def test_not_found_by_id(client, fake):
    """Once records exist, each route's own words for an id that names none."""
    connector_id = client.create_connector(openai_connector(fake))
    client.register(connector_id)
    unknown = "AAAAAAAAAAAAAAAAAAAA"
    assert reason(client.call("GET", f"{ML}/models/{unknown}")) == \
        f"Failed to find model with the provided model id: {unknown}"          # GetModelTransportAction
    assert reason(client.call("DELETE", f"{ML}/models/{unknown}")) == "Failed to find model"
    assert reason(client.call("POST", f"{ML}/models/{unknown}/_deploy")) == "Failed to find model"
    assert reason(client.call("POST", f"{ML}/models/{unknown}/_predict", {"parameters": {}})) == "Failed to find model"
    assert reason(client.call("POST", f"{ML}/models/{unknown}/_predict/stream", stream_body())) == \
        "Failed to find model"
    assert reason(client.call("PUT", f"{ML}/models/{unknown}", {"name": "x"})) == \
        f"Failed to find model to update with the provided model id: {unknown}"  # UpdateModelTransportAction
    assert reason(client.call("GET", f"{ML}/model_groups/{unknown}")) == \
        f"Failed to find model group with the provided model group id: {unknown}"
    assert reason(client.call("PUT", f"{ML}/model_groups/{unknown}", {"description": "x"})) == \
        f"Failed to find model group with the provided model group id: {unknown}"
    assert reason(client.call("GET", f"{ML}/connectors/{unknown}")) == \
        f"Failed to find connector with the provided connector id: {unknown}"
    assert reason(client.call("POST", f"{ML}/models/_register", {"name": "m", "connector_id": unknown})) == \
        f"Failed to find connector:{unknown}"                                  # MLModelManager.getConnector
    assert reason(client.call("GET", f"{ML}/tasks/{unknown}")) == "Failed to find task"
    # ml-commons answers OpenSearch's delete response ("result": "not_found", 404) here; the
    # contract wants every error in the error body, so it is worded as the get's
    client.ok("POST", f"{ML}/model_groups/_register", {"name": "a group"})
    assert reason(client.call("DELETE", f"{ML}/connectors/{unknown}")) == \
        f"Failed to find connector with the provided connector id: {unknown}"
    assert reason(client.call("DELETE", f"{ML}/model_groups/{unknown}")) == \
        f"Failed to find model group with the provided model group id: {unknown}"
