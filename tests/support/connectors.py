"""Connector bodies pointed at the fakes: the seed's OpenAI connector, the ml-commons
Bedrock Converse blueprint, and the Bedrock/OpenAI embedding blueprints."""

from __future__ import annotations

import json
import socket
from typing import Any

from mlstream.testing.fake_batch import FakeOpenAIBatches
from mlstream.testing.fake_bedrock import FakeBedrock
from mlstream.testing.fake_openai import FakeOpenAI, Scenario

from .clients import Client
from .wire import RawResponse, raw_request


def host(fake: Any) -> str:
    """A fake's ``host:port``, as a connector's ``endpoint`` parameter holds it."""
    return fake.url.removeprefix("http://")


def openai_connector(fake: FakeOpenAI, *, model: str = "gpt-3.5-turbo", path: str = "/v1/chat/completions",
                     headers: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """The seed's connector body, verbatim apart from the endpoint (the fake)."""
    body = {
        "name": "OpenAI Chat Connector",
        "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": fake.url.removeprefix("http://"), "model": model},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}" + path,
            "headers": {"Authorization": "Bearer ${credential.openAI_key}", **(headers or {})},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }
    body.update(extra)
    return body


def openai_embedding_connector(fake: FakeOpenAI, **action: Any) -> dict[str, Any]:
    # openai_connector_embedding_blueprint.md
    return {
        "name": "OpenAI embedding", "description": "The connector to OpenAI embeddings", "version": "1",
        "protocol": "http",
        "parameters": {"model": "text-embedding-ada-002"},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": f"http://{host(fake)}/v1/embeddings",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"input\": ${parameters.input}, \"model\": \"${parameters.model}\" }",
            "pre_process_function": "connector.pre_process.openai.embedding",
            "post_process_function": "connector.post_process.openai.embedding",
            **action,
        }],
    }


# --- Bedrock: the ml-commons Converse blueprint at the fake --------------------------------

BEDROCK_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
# The ml-commons Bedrock Converse blueprint, verbatim but for the host (the fake on
# loopback) and a pass-through for the fake's knobs; inferenceConfig shows that the
# whole body reaches ConverseStream.
BEDROCK_CONVERSE_BODY = (
    '{ "messages": [ { "role": "user", "content": [ { "text": "${parameters.inputs}" } ] } ], '
    '"inferenceConfig": {"maxTokens": 512, "temperature": 0.2}, '
    '"additionalModelRequestFields": {"fake": ${parameters.fake}} }')


def aws_credential(fake: FakeBedrock) -> dict[str, str]:
    return {"access_key": fake.access_key, "secret_key": fake.secret_key}


def bedrock_connector(fake: FakeBedrock, **credential_overrides: Any) -> dict[str, Any]:
    credential = aws_credential(fake)
    if fake.session_token:
        credential["session_token"] = fake.session_token
    credential.update(credential_overrides)
    return {
        "name": "Amazon Bedrock Converse",
        "description": "Connector for Amazon Bedrock Converse",
        "version": 1,
        "protocol": "aws_sigv4",
        "credential": credential,
        "parameters": {"region": fake.region, "service_name": "bedrock", "model": BEDROCK_MODEL,
                       "endpoint": host(fake), "fake": {}},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "headers": {"content-type": "application/json"},
            "url": "http://${parameters.endpoint}/model/${parameters.model}/converse",
            "request_body": BEDROCK_CONVERSE_BODY,
        }],
    }


def bedrock_stream(client: Client, model_id: str, interface: str | None = "bedrock/converse/claude",
                   **fake: Any) -> RawResponse:
    parameters: dict[str, Any] = {"inputs": "Who is Hamlet?", "fake": fake}
    if interface:
        parameters["_llm_interface"] = interface
    return raw_request(client.base_url, "POST", f"/_plugins/_ml/models/{model_id}/_predict/stream",
                       json.dumps({"parameters": parameters}).encode())


def maps(response: RawResponse) -> list[dict[str, Any]]:
    """The ``dataAsMap`` of every event of a predict stream."""
    return [e["inference_results"][0]["output"][0]["dataAsMap"] for e in response.events()]


def bedrock_invoke_connector(fake: FakeBedrock, model: str, body: str, pre: str, post: str,
                             **parameters: Any) -> dict[str, Any]:
    return {
        "name": f"Amazon Bedrock Connector: {model}", "description": "d", "version": 1, "protocol": "aws_sigv4",
        "parameters": {"region": fake.region, "service_name": "bedrock", "model": model,
                       "endpoint": host(fake), **parameters},
        "credential": aws_credential(fake),
        "actions": [{
            "action_type": "predict", "method": "POST",
            "url": "http://${parameters.endpoint}/model/${parameters.model}/invoke",
            "headers": {"content-type": "application/json", "x-amz-content-sha256": "required"},
            "request_body": body, "pre_process_function": pre, "post_process_function": post,
        }],
    }


def titan_connector(fake: FakeBedrock, **parameters: Any) -> dict[str, Any]:
    # bedrock_connector_titan_embedding_blueprint.md
    return bedrock_invoke_connector(fake, "amazon.titan-embed-text-v1", "{ \"inputText\": \"${parameters.inputText}\" }",
                                    "connector.pre_process.bedrock.embedding",
                                    "connector.post_process.bedrock.embedding", **parameters)


BEDROCK_TOOL = {"name": "get_weather", "input": {"location": "Elsinore"}, "tool_use_id": "tooluse_front0001"}


def bedrock_model(client: Client, bedrock: Any, name: str = "claude", **fake: Any) -> str:
    connector = bedrock_connector(bedrock)
    connector["parameters"]["fake"] = fake
    return client.register(client.create_connector(connector), name=name)


def openai_batch_connector(fake: FakeOpenAIBatches, *, with_status: bool = True) -> dict[str, Any]:
    """The connector of OpenSearch's Batch Predict API page: batch_predict with its
    status and cancel actions written out."""
    base = f"http://{host(fake)}/v1/batches"
    auth = {"Authorization": "Bearer ${credential.openAI_key}"}
    actions: list[dict[str, Any]] = [
        {"action_type": "batch_predict", "method": "POST", "url": base, "headers": auth,
         "request_body": "{ \"input_file_id\": \"${parameters.input_file_id}\", \"endpoint\": "
                         "\"${parameters.endpoint}\", \"completion_window\": \"24h\" }"}]
    if with_status:
        actions += [{"action_type": "batch_predict_status", "method": "GET", "url": base + "/${parameters.id}",
                     "headers": auth},
                    {"action_type": "cancel_batch_predict", "method": "POST",
                     "url": base + "/${parameters.id}/cancel", "headers": auth}]
    return {"name": "OpenAI Embedding model", "description": "OpenAI embedding model for testing offline batch",
            "version": "1", "protocol": "http",
            "parameters": {"model": "text-embedding-ada-002", "input_file_id": "file-abc",
                           "endpoint": "/v1/embeddings"},
            "credential": {"openAI_key": fake.api_key}, "actions": actions}


def closed_port() -> str:
    """``127.0.0.1:<port>`` where nothing listens: a connection there is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


PROMPT_BODY = ('{ "model": "${parameters.model}", "messages": [ {"role": "user", '
               '"content": "${parameters.prompt}"} ] }')


def prompt_chat_connector(fake: FakeOpenAI, text: str, **scenario: Any) -> dict[str, Any]:
    """A chat connector rendering ``${parameters.prompt}`` as the user's message, whose
    ``_predict`` answers ``{"response": <the answer's text>}`` (its ``response_filter``): the
    model an agent's or an MCP server's ``MLModelTool`` calls."""
    return {
        "name": "prompt chat", "protocol": "http", "version": 1,
        "parameters": {"endpoint": host(fake), "model": Scenario(chunks=2, text=text, **scenario).to_model(),
                       "response_filter": "$.choices[0].message.content"},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{"action_type": "predict", "method": "POST",
                     "url": "http://${parameters.endpoint}/v1/chat/completions",
                     "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                     "request_body": PROMPT_BODY}]}
